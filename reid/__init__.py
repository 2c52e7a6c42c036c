"""circle-reid: person re-identification with Circle loss and friends."""
__version__ = "0.1.0"
