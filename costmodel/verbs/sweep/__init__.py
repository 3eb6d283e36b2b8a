"""The sweep verb: a grid of configs evaluated in chunks and streamed to a format."""
