"""Install hints come from one table (`kassette._extras`), whatever lazy import asks."""

from __future__ import annotations

import subprocess
import sys

import pytest

from kassette._extras import EXTRAS, install_hint, requires


def test_a_missing_module_names_its_extra() -> None:
    with (
        pytest.raises(ImportError, match=r'kx\.thing needs scipy.*pip install "kassette\[stats\]"'),
        requires("kx.thing"),
    ):
        raise ImportError("No module named 'scipy'", name="scipy.stats")
    assert install_hint("S3Storage", "botocore.exceptions").endswith('"kassette[s3]"')
    assert install_hint("x", "unknown_package").endswith('"kassette[all]"')


@pytest.mark.parametrize(
    ("blocked", "statement", "extra"),
    [
        ("boto3", "from kassette.storage._s3 import _default_client; _default_client()", "s3"),
        ("duckdb", "import kassette.explore as kx; kx.load('memory:').sql('select 1')", "explore"),
        ("opentelemetry", "import kassette.integrations.otel", "otel"),
    ],
)
def test_every_lazy_import_gives_the_table_s_hint(blocked: str, statement: str, extra: str) -> None:
    """In a process where `blocked` cannot import, the feature's error names its extra."""
    script = f"""
import sys
sys.modules[{blocked!r}] = None  # an import of it now raises ImportError
try:
    {statement}
except ImportError as error:
    print(error)
"""
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True
    ).stdout
    assert f'pip install "kassette[{extra}]"' in out, out
    assert EXTRAS[blocked][1] == extra
