"""Optional dependencies: which extra installs each one, in one table (fsspec's
`known_implementations` idea), and the one way a lazy import says so when it is missing.

    with requires("kx.timeline"):
        import altair

raises, when altair is not installed, `ImportError: kx.timeline needs altair, which is not
installed: pip install "kassette[explore]"`, chained to the original error.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

# the top-level import name -> (the distribution to name, the extra that installs it)
EXTRAS: dict[str, tuple[str, str]] = {
    "boto3": ("boto3", "s3"),
    "botocore": ("boto3", "s3"),
    "pandas": ("pandas", "explore"),
    "pyarrow": ("pyarrow", "explore"),
    "altair": ("altair", "explore"),
    "duckdb": ("duckdb", "explore"),
    "genai_prices": ("genai-prices", "explore"),
    "anywidget": ("anywidget", "explore"),
    "ipywidgets": ("ipywidgets", "explore"),
    "openai": ("the openai SDK", "openai"),
    "anthropic": ("the anthropic SDK", "anthropic"),
    "opentelemetry": ("the OpenTelemetry SDK and opentelemetry-proto", "otel"),
    "google": ("protobuf (opentelemetry-proto)", "otel"),
    "scipy": ("scipy", "stats"),
    "statsmodels": ("statsmodels", "stats"),
    "inspect_ai": ("inspect_ai", "inspect"),
    "distributed": ("dask distributed", "distributed"),
}


def install_hint(feature: str, module: str) -> str:
    """What to say when `feature` cannot import `module` (a dotted name is fine)."""
    distribution, extra = EXTRAS.get(module.split(".")[0], (module, "all"))
    return (
        f'{feature} needs {distribution}, which is not installed: pip install "kassette[{extra}]"'
    )


@contextmanager
def requires(feature: str) -> Iterator[None]:
    """Re-raise an `ImportError` from the block as one that names the extra to install."""
    try:
        yield
    except ImportError as exc:
        raise ImportError(f"{install_hint(feature, exc.name or '')} ({exc})") from exc
