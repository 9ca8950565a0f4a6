"""Codec exception type (re-exported by :mod:`kgate.codec.api`)."""


class CodecError(ValueError):
    """Raised on malformed/truncated input, unknown api keys, unsupported versions or unencodable values."""
