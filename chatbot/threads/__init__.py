"""The only door to threads: the Backend (local and remote), the turn runner, turn events,
attachments."""
