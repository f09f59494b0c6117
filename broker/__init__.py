"""The tidemq broker and name server."""
