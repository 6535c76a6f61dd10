"""didactyl-tui: a terminal chat client with an embedded AI agent whose memory lives on Nostr."""


def package_version() -> str:
    """This install's version, from the package metadata (pyproject.toml's, once installed): one source."""
    from importlib.metadata import PackageNotFoundError, version  # off the first frame's path

    try:
        return version("didactyl-tui")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown (not installed)"


def __getattr__(name: str) -> str:
    if name == "__version__":
        return package_version()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
