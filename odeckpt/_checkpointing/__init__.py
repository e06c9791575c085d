"""_checkpointing."""
