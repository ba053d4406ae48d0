"""A thread's past read from its checkpoints: snapshots, turns, the summary's story, records,
export."""
