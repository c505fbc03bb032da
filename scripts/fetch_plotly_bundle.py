"""Fetch plotly.js's cartesian bundle for the dashboard (dashboards/plotly_bundle.py) from npm.

    .venv/bin/python scripts/fetch_plotly_bundle.py

Takes ``plotly.js-cartesian-dist-min`` at the version of the plotly.js the installed ``plotly``
package carries, checks the tarball against the registry's sha512, and writes the bundle and its
licence to ``dashboards/vendor/`` (not tracked by git).  Without it the dashboard serves plotly's
full bundle, so a failure here is a line on stderr and exit code 1, never a broken dashboard.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import sys
import tarfile
import urllib.request

from dashboards import plotly_bundle

REGISTRY = "https://registry.npmjs.org/plotly.js-cartesian-dist-min"
MEMBERS = {"package/plotly-cartesian.min.js": plotly_bundle.BUNDLE, "package/LICENSE": plotly_bundle.LICENSE}


def fetch(version: str) -> None:
    """Download, verify and write the bundle of ``version``; raises on any failure."""
    with urllib.request.urlopen(f"{REGISTRY}/{version}", timeout=60) as answer:
        dist = json.load(answer)["dist"]
    with urllib.request.urlopen(dist["tarball"], timeout=120) as answer:
        data = answer.read()
    kind, _, digest = dist["integrity"].partition("-")
    if kind != "sha512" or base64.b64decode(digest) != hashlib.sha512(data).digest():
        raise ValueError(f"{dist['tarball']} does not match the registry's {kind} checksum")
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        contents = {name: tar.extractfile(name).read() for name in MEMBERS}  # type: ignore[union-attr]
    for name, target in MEMBERS.items():
        target.parent.mkdir(parents=True, exist_ok=True)
        part = target.with_suffix(target.suffix + ".part")
        part.write_bytes(contents[name])
        part.replace(target)


def main() -> int:
    version = plotly_bundle.installed_version()
    if plotly_bundle.bundle_version() == version:
        return 0
    try:
        fetch(version)
    except (OSError, ValueError, KeyError, tarfile.TarError) as error:
        print(
            f"setup: plotly.js's cartesian bundle {version} not fetched from {REGISTRY} ({error}); "
            "the dashboard serves plotly's full bundle",
            file=sys.stderr,
        )
        return 1
    print(f"setup: plotly.js's cartesian bundle {version} in {plotly_bundle.BUNDLE.parent}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
