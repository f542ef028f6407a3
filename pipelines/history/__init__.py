"""Append-only history: raw records, decoded offset commits and group records, per micro-batch."""
