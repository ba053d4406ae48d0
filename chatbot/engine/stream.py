"""What the graph streams that its readers recognise. Imports nothing: the readers of a
stream (the turn events, the benchmarks) take it without the graph."""

SUMMARY_TAG = "chatbot:summary"
"""The tag of the summary model's calls: their tokens are not the reply's."""
