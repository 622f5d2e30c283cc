"""The watched folder: settle, claim, quote and file each dropped intake; survives crashes and rule edits."""
