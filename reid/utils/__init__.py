"""Small helpers shared by every layer: file io, logging, registries."""
