"""The English fixed messages: what Tether itself says, word for word as it always has.

Keys name what a message says; ``{name}`` placeholders are filled with ``str.format``.
Every key here has its translation in ``zh.py`` with the same placeholders (a test says so).
"""

from __future__ import annotations

EN: dict[str, str] = {
    # notices: a turn that fails, is throttled, waits or is stopped is never met with silence
    "dead_notice": "Sorry, something went wrong and I could not answer this. Try again later.",
    "busy_notice": "The model is unavailable right now, so I could not answer this."
    " Please try again in a few minutes.",
    "throttled": "You are sending messages faster than I can take them; I skipped some.",
    "wait_expired": "No answer came in time, so I stopped waiting for it.",
    "stopped": "Stopped.",
    "stopped_answer": "Stopped the running answer.",
    "stopped_waiting": "Stopped the answer that was waiting to be tried again.",
    "nothing_running": "Nothing is running.",
    # questions asked with ctx.ask, and approvals
    "question_cancelled": "Cancelled: I am no longer waiting for an answer to “{question}”.",
    "no_question": "There is no question waiting for your answer here.",
    "question_gone": "This question is no longer open.",
    "question_answered": "This was answered already.",
    "question_answered_by": "This was answered already by {name}.",
    "question_expired": "This question expired; nothing was done.",
    "question_was_cancelled": "This question was cancelled; nothing was done.",
    "question_not_yours": "This question is for someone else to answer.",
    "approved_already": "This was approved already.",
    "approved_already_by": "This was approved already by {name}.",
    "denied_already": "This was denied already.",
    "denied_already_by": "This was denied already by {name}.",
    # access
    "admins_only": "Only the bot's admins can do that.",
    "access_hint": "I only answer people the bot's owner let in."
    " Message me directly to ask for access.",
    "pairing_requested": "I don't know you yet. Ask the owner of this bot to run:\n"
    "tether pair approve {code}",
    "access_approved": "You're in: the bot's owner approved you."
    " Write to me anytime; /help lists what I can do.",
    "pairing_approved": "Approved {who}.",
    "pairing_unknown": "No pairing request with code {code!r}.",
    "owner_code_invalid": "That is not a valid owner code.",
    "owner_claimed": "You are the bot's owner now: allowed, and an admin."
    " /help lists what I can do.",
    # /start, /help and the agent's own commands
    "greeting": "Hi, I'm {name}.\n\n{help}",
    "help_echo": "I answer with your text. Commands:",
    "help_llm": "Just write to chat with me. Commands:",
    "unknown_command": "Unknown command /{command}. /help lists what I can do.",
    "context_reset": "Started a fresh context. The earlier conversation is archived, not"
    " deleted; saved facts and the persona stay.",
    "persona_custom": "Persona (custom):\n{persona}",
    "persona_default": "Persona (default):\n{persona}",
    "persona_restored": "Persona back to the default.",
    "persona_set": "Persona set for this chat.",
    # what /help says of each built-in command (command_<name>)
    "command_start": "a greeting and this list",
    "command_help": "this list",
    "command_reset": "start a fresh context (the old conversation is archived, not deleted)",
    "command_new": "the same as /reset",
    "command_persona": 'show or set who I am in this chat ([text]); "/persona reset" restores it',
    "command_remember": "save a fact I keep in mind (TEXT); about you, it follows you to every"
    " chat",
    "command_facts": "list the facts I keep in mind here (saved or learned by reflection)",
    "command_forget": "list saved facts, or forget one ([N | text | all])",
    "command_usage": "tokens and cost spent in this chat",
    "command_search": "find past messages of this chat by words (TEXT)",
    "command_link": "link your account on another platform to this one ([CODE])",
    "command_unlink": "undo /link for this account",
    "command_forgetme": "erase everything I keep of you (asks to confirm)",
    "command_export": "everything I keep of you, as a file (in a direct message)",
    "command_stop": "stop the answer I am working on now",
    "command_whoami": "your user and chat ids (for access.allow)",
    "command_approve": "let in the person who asked for access with CODE (admins)",
    # /remember, /facts, /forget, /search
    "remember_what": "What should I remember? /remember TEXT",
    "remembered": "I'll remember: {text}",
    "remembered_about_you": "I'll remember about you: {text}",
    "no_facts": "No saved facts. /remember TEXT saves one.",
    "facts": "Saved facts:\n{facts}\n\n/forget N, /forget WORDS or /forget all",
    "fact_about_you": " (about you)",
    "no_fact_matches": "No saved fact matches {wanted!r}.\n\n{facts}",
    "forgotten": "Forgotten:\n{facts}",
    "search_what": "What should I look for? /search WORDS",
    "nothing_found": "Nothing found for {query!r}.",
    # /link, /unlink, /forgetme
    "link_person_only": "Only a person can link accounts.",
    "link_dm_only": "Linking works in a direct message only: write /link to me privately."
    " A code shown here could be used by anyone who reads it.",
    "link_code": "To link another account to this one, send this to me from it (in a direct"
    " message) within {minutes} minutes:\n\n/link {code}\n\n"
    "What you told me about yourself is then known in both; /unlink undoes it.",
    "linked": "Linked: you are also {others} to me now. /unlink undoes it.",
    "link_code_self": "That code is for another account: send it from there, not here.",
    "link_code_refused": "That code is unknown, used or expired. /link makes a new one.",
    "linked_with": " You are linked with {known}.",
    "unlink_person_only": "Only a person can unlink accounts.",
    "unlinked": "Unlinked: this account is on its own again. What you told me about yourself"
    " here stays with this account.",
    "not_linked": "This account is not linked to another. /link links one.",
    "forget_person_only": "Only a person can be forgotten.",
    "forget_nothing_kept": "I keep nothing of you across a restart here:"
    " there is nothing to erase.",
    "forget_confirm": "This erases everything I keep of you, on every account you linked:"
    " your messages and my replies, your DMs, what you told me about yourself, your"
    " reminders and files. It cannot be undone, and you may have to ask for access again."
    " Send /forgetme yes to erase.",
    "person_forgotten": "Done: I erased {count} records of you. Anything you write from now"
    " on is new to me.",
    # /export
    "export_person_only": "Only a person has data to export.",
    "export_dm_only": "Your export holds your direct messages too, so I send it in a direct"
    " message only: write /export to me privately.",
    "export_unsupported": "This bot's store cannot make an export.",
    "export_no_documents": "I cannot send a document on {platform}. Ask the bot's operator"
    " for your export: tether export {identity}",
    "export_too_big": "Your export is {size}, more than I can send on {platform} ({limit})."
    " Ask the bot's operator for it: tether export {identity}",
    "export_erased": "Your data was erased: there is nothing to export any more.",
    # background tasks
    "nothing_to_cancel": "There is no question waiting for your answer here,"
    " and no task is running.",
    "no_tasks": "No background tasks in this chat.",
    "tasks": "Tasks:\n{tasks}",
    "cancel_which": "Which task? /cancel ID (running: {ids})",
    "no_such_task": "No task {id} in this chat. /tasks lists them.",
    "task_ended": "Task {id} already ended: {status}.",
    "task_cancelled": "Cancelled task {id} ({goal}). What it finished is kept.",
}
