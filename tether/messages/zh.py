"""The Simplified Chinese fixed messages (``messages.language: zh``, or a chat whose
platform says its person writes Chinese): the same keys and placeholders as ``en.py``.

Full-width punctuation (the comma, colon, brackets) is how Chinese is written, not a
typo of ASCII's: hence RUF001 off in this file.
"""

# ruff: noqa: RUF001

from __future__ import annotations

ZH: dict[str, str] = {
    "dead_notice": "抱歉，出了点问题，我没能回复这条消息。请稍后再试。",
    "busy_notice": "模型暂时无法使用，所以我没能回复这条消息。请过几分钟再试。",
    "throttled": "你发消息的速度超过了我能处理的速度，我跳过了其中一些。",
    "wait_expired": "没有及时等到回答，我已不再等待。",
    "stopped": "已停止。",
    "stopped_answer": "已停止正在生成的回答。",
    "stopped_waiting": "已停止等待重试的回答。",
    "nothing_running": "当前没有正在进行的回答。",
    "question_cancelled": "已取消：我不再等待“{question}”的回答。",
    "no_question": "这里没有等待你回答的问题。",
    "question_gone": "这个问题已不再开放。",
    "question_answered": "这个问题已经有人回答了。",
    "question_answered_by": "这个问题已经由 {name} 回答了。",
    "question_expired": "这个问题已过期，没有执行任何操作。",
    "question_was_cancelled": "这个问题已被取消，没有执行任何操作。",
    "question_not_yours": "这个问题需要由其他人来回答。",
    "approved_already": "这已经被批准了。",
    "approved_already_by": "这已经由 {name} 批准了。",
    "denied_already": "这已经被拒绝了。",
    "denied_already_by": "这已经由 {name} 拒绝了。",
    "admins_only": "只有机器人的管理员才能这样做。",
    "access_hint": "我只回复机器人主人允许的人。请私信我申请使用权限。",
    "pairing_requested": "我还不认识你。请让这个机器人的主人运行：\ntether pair approve {code}",
    "access_approved": "你已获准使用：机器人的主人批准了你。"
    "随时给我发消息；/help 会列出我能做的事。",
    "pairing_approved": "已批准 {who}。",
    "pairing_unknown": "没有代码为 {code!r} 的配对请求。",
    "owner_code_invalid": "这不是有效的主人代码。",
    "owner_claimed": "你现在是这个机器人的主人：已获准使用，并且是管理员。/help 会列出我能做的事。",
    "greeting": "你好，我是{name}。\n\n{help}",
    "help_echo": "我会原样回复你发的文字。命令：",
    "help_llm": "直接发消息就能和我聊天。命令：",
    "unknown_command": "未知命令 /{command}。/help 会列出我能做的事。",
    "context_reset": "已开始新的对话。之前的对话已归档，并未删除；已保存的事实和人设保持不变。",
    "persona_custom": "人设（自定义）：\n{persona}",
    "persona_default": "人设（默认）：\n{persona}",
    "persona_restored": "人设已恢复为默认。",
    "persona_set": "已为这个聊天设置人设。",
    "command_start": "问候语和这份列表",
    "command_help": "这份列表",
    "command_reset": "开始新的对话（旧对话会归档，不会删除）",
    "command_new": "与 /reset 相同",
    "command_persona": "查看或设置我在这个聊天中的身份（[文本]）；“/persona reset” 恢复默认",
    "command_remember": "保存一条让我记住的事实（文本）；关于你的事实会在每个聊天中跟随你",
    "command_facts": "列出我在这里记住的事实（保存的或通过反思学到的）",
    "command_forget": "列出已保存的事实，或忘记其中一条（[编号 | 文本 | all]）",
    "command_usage": "这个聊天消耗的 token 和费用",
    "command_search": "按关键词查找这个聊天的历史消息（文本）",
    "command_link": "把你在其他平台上的账号与这个账号关联（[代码]）",
    "command_unlink": "撤销这个账号的 /link",
    "command_forgetme": "删除我保存的关于你的一切（会先请你确认）",
    "command_export": "以文件形式发送我保存的关于你的一切（在私聊中）",
    "command_stop": "停止我正在生成的回答",
    "command_whoami": "你的用户 ID 和聊天 ID（用于 access.allow）",
    "command_approve": "允许用 CODE 申请使用权限的人进入（管理员）",
    "remember_what": "要我记住什么？/remember 内容",
    "remembered": "我会记住：{text}",
    "remembered_about_you": "我会记住关于你的这一点：{text}",
    "no_facts": "还没有保存的事实。用 /remember 内容 保存一条。",
    "facts": "已保存的事实：\n{facts}\n\n/forget 编号、/forget 关键词 或 /forget all",
    "fact_about_you": "（关于你）",
    "no_fact_matches": "没有与 {wanted!r} 匹配的已保存事实。\n\n{facts}",
    "forgotten": "已忘记：\n{facts}",
    "search_what": "要我找什么？/search 关键词",
    "nothing_found": "没有找到与 {query!r} 相关的内容。",
    "link_person_only": "只有真人用户才能关联账号。",
    "link_dm_only": "关联账号只能在私聊中进行：请私信我发送 /link。"
    "在这里显示的代码，任何看到它的人都能使用。",
    "link_code": "要把另一个账号关联到这个账号，请在 {minutes} 分钟内用那个账号"
    "（在私聊中）把下面这条消息发给我：\n\n/link {code}\n\n"
    "之后，你告诉过我的关于你自己的信息在两个账号中都会用到；/unlink 可以撤销。",
    "linked": "已关联：现在对我来说你也是 {others}。/unlink 可以撤销。",
    "link_code_self": "这个代码是给另一个账号用的：请从那个账号发送，而不是在这里。",
    "link_code_refused": "这个代码无效、已被使用或已过期。/link 会生成一个新的。",
    "linked_with": "你已与 {known} 关联。",
    "unlink_person_only": "只有真人用户才能取消关联账号。",
    "unlinked": "已取消关联：这个账号重新独立了。"
    "你在这里告诉我的关于你自己的信息会留在这个账号中。",
    "not_linked": "这个账号没有关联其他账号。/link 可以关联一个。",
    "forget_person_only": "只有真人用户才能被遗忘。",
    "forget_nothing_kept": "这里重启后我不会保留任何关于你的信息：没有需要删除的内容。",
    "forget_confirm": "这会删除我保存的关于你的一切，包括你关联的每个账号：你的消息和我的回复、"
    "你的私聊、你告诉我的关于你自己的信息、你的提醒和文件。此操作无法撤销，"
    "之后你可能需要重新申请使用权限。发送 /forgetme yes 确认删除。",
    "person_forgotten": "完成：我删除了关于你的 {count} 条记录。"
    "从现在起你写的任何内容对我来说都是新的。",
    "export_person_only": "只有真人用户才有可导出的数据。",
    "export_dm_only": "你的导出包含你的私聊内容，所以我只在私聊中发送：请私信我发送 /export。",
    "export_unsupported": "这个机器人的存储无法生成导出。",
    "export_no_documents": "我无法在 {platform} 上发送文件。"
    "请向机器人的运营者索取你的导出：tether export {identity}",
    "export_too_big": "你的导出有 {size}，超过了我在 {platform} 上能发送的大小（{limit}）。"
    "请向机器人的运营者索取：tether export {identity}",
    "export_erased": "你的数据已被删除：没有可导出的内容了。",
    "nothing_to_cancel": "这里没有等待你回答的问题，也没有正在运行的任务。",
    "no_tasks": "这个聊天中没有后台任务。",
    "tasks": "任务：\n{tasks}",
    "cancel_which": "要取消哪个任务？/cancel 编号（正在运行：{ids}）",
    "no_such_task": "这个聊天中没有任务 {id}。/tasks 会列出所有任务。",
    "task_ended": "任务 {id} 已经结束：{status}。",
    "task_cancelled": "已取消任务 {id}（{goal}）。已完成的部分会保留。",
}
