"""The llm agent: streaming, vision, reflection, several agents and rooms."""
