"""The ``internal-topics`` filter (KIP-619 at the proxy) and the marks topic it keeps."""
