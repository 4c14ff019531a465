"""Consumer groups: the public ``Consumer``, a member's thread, joining and the
heartbeat, commits, pinned and overflow members, and ``describe_group``."""
