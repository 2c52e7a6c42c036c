"""Tracking: MOTChallenge sequences, trackers driven by the re-ID model, linking people across cameras."""
