"""Checks against the live cluster: snapshots of its answers, classification, the quality gate."""
