"""``python -m chatbot``: the same as the ``chatbot`` command."""

from chatbot.quick import main

main()
