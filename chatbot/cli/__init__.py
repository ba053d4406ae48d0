"""The ``chatbot`` command: the entry point, the Typer app and its commands, shell completion."""
