"""Current state as the group coordinator replays the log: offsets, groups, members, ownership."""
