"""Re-ID where it is used: MOTChallenge sequences and files, tracks -> re-ID data, trackers, cameras.

This package stands above inference, evaluation and data (it may import any of them; nothing
below imports it). Import its modules directly (``from reid.tracking.mot_files import read_gt``):
this file stays empty so that the modules can grow independently.
"""
