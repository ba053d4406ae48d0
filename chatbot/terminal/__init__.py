"""The REPL: the chat loop, slash commands, line input, rendering, display, clipboard, editor."""
