"""The memory policy, pure: when to fold, what to keep, token counts, prompts, the state's shape,
usage and cost. No I/O, no LangGraph runtime."""
