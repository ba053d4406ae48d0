"""Persistence in one place: SQLite and PostgreSQL, LangGraph's savers as chatbot uses them, the
search index, leases, copying."""
