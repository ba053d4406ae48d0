"""``python -m chatbot``: the same as the ``chatbot`` command."""

from chatbot.cli.main import main

main()
