"""Regenerate ``gpuaccept/data/bulletins.json`` from a local copy of NVIDIA's machine-readable security bulletins
(github.com/NVIDIA/product-security: ``<year>/<id>/<id>.json``, CSAF 2.0).

    git clone https://github.com/NVIDIA/product-security /tmp/ps
    gpuaccept-bulletins --source /tmp/ps --commit "$(git -C /tmp/ps rev-parse HEAD)"

How a CSAF document is read: ``product_tree`` holds, under ``architecture`` branches (``Linux(R580)``,
``All(4.5)``, ``Linux``), ``product_version`` branches named by their product (``Tesla``, ``DCGM``) whose
product's name is a version (the fixed one: ``580.159.03``) or a range (``All driver versions prior to
580.159.03``, ``0.0  to 4.5.2``); each vulnerability's ``product_status`` names the ``fixed`` and
``known_affected`` product ids. Kept:

* GPU display driver bulletins: the ``Linux(R<branch>)`` architectures (GeForce, RTX/Quadro, Tesla: one
  driver package per branch); vGPU guest drivers, vGPU managers, gaming and Windows are left out.
* products named ``DCGM`` and ``DCGM Exporter``, on any non-Windows architecture; an architecture
  naming no branch (``Linux``, ``All(4.5)``: the bulletin's ranges start at 0.0) is one line for all.

A line's fixed version is the highest any CVE of the bulletin needs on it; a line with an affected product
and no fixed one has none.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from gpuaccept.thresholds.bulletins import Bulletin, Catalogue, Line, version_key

__all__ = ["DEFAULT_OUT", "bulletin_of", "main", "read_tree"]

DEFAULT_OUT = Path(__file__).resolve().parents[1] / "data" / "bulletins.json"
REPOSITORY = "https://github.com/NVIDIA/product-security"
_DRIVER_ARCH = re.compile(r"^Linux\(R(\d+)\)$")
_VERSION = re.compile(r"\d+(?:\.\d+)+")
_RANGE = re.compile(r"prior to|to |up to|and including", re.IGNORECASE)


def _walk(branches: Sequence[Mapping[str, Any]], arch: str | None = None) -> Iterator[tuple[str | None, Any]]:
    for branch in branches:
        here = branch.get("name") if branch.get("category") == "architecture" else arch
        if branch.get("category") == "product_version":
            yield here, branch
        yield from _walk(branch.get("branches", []), here)


def read_tree(doc: Mapping[str, Any]) -> dict[str, tuple[str | None, str, str]]:
    """product id -> (architecture, product name, version text) of every ``product_version``."""
    out: dict[str, tuple[str | None, str, str]] = {}
    for arch, entry in _walk(doc.get("product_tree", {}).get("branches", [])):
        product = entry.get("product", {})
        # the branch's name is the product ("Tesla", "DCGM"), its product's name the version text
        out[product.get("product_id", "")] = (arch, str(entry.get("name", "")), str(product.get("name", "")))
    return out


def _component(title: str, arch: str | None, product: str) -> tuple[str, str] | None:
    """(component, line) of a product version this catalogue keeps, None for the others."""
    if arch is None or "windows" in arch.lower():
        return None
    if product.strip() == "DCGM Exporter":
        return "dcgm_exporter", "*"
    if product.strip() == "DCGM":
        return "dcgm", "*"
    if "display driver" in title.lower():
        match = _DRIVER_ARCH.match(arch.strip())
        if match and product not in ("Guest driver", "Virtual GPU Manager"):
            return "gpu_driver", f"R{match.group(1)}"
    return None


def bulletin_of(doc: Mapping[str, Any]) -> Bulletin | None:
    """The catalogue's entry for one CSAF bulletin; None when it holds no component the catalogue keeps."""
    document = doc.get("document", {})
    tracking = document.get("tracking", {})
    title = str(document.get("title", ""))
    tree = read_tree(doc)
    fixed: dict[tuple[str, str], list[str]] = {}
    affected: dict[tuple[str, str], set[str]] = {}
    notes: dict[tuple[str, str], set[str]] = {}
    for vuln in doc.get("vulnerabilities", []):
        cve = vuln.get("cve", "")
        status = vuln.get("product_status", {})
        for pid in status.get("known_affected", []):
            arch, product, name = tree.get(pid, (None, "", ""))
            where = _component(title, arch, product)
            if where:
                affected.setdefault(where, set()).add(cve)
        for pid in status.get("fixed", []):
            arch, product, name = tree.get(pid, (None, "", ""))
            where = _component(title, arch, product)
            match = _VERSION.search(name)
            if where and match and not _RANGE.search(name):
                fixed.setdefault(where, []).append(match.group(0))
    components: dict[str, dict[str, Line]] = {}
    for where in sorted(set(affected) | set(fixed)):
        versions = sorted(set(fixed.get(where, [])), key=version_key)
        note = f"products of this line name different fixes: {', '.join(versions)}" if len(versions) > 1 else None
        if versions and where in affected:
            ranges = _affected_ranges(doc, tree, title, where)
            if any(version_key(r) >= version_key(versions[-1]) for r in ranges):
                note = (note + "; " if note else "") + (
                    f"the bulletin's affected range ends at {', '.join(ranges)}, not below its fixed {versions[-1]}"
                )
        notes.setdefault(where, set())
        component, line = where
        components.setdefault(component, {})[line] = Line(
            fixed=versions[-1] if versions else None, cves=sorted(affected.get(where, set())), note=note
        )
    if not components:
        return None
    ident = str(tracking.get("id", ""))
    cves = sorted({v.get("cve", "") for v in doc.get("vulnerabilities", []) if v.get("cve")})
    return Bulletin(
        id=ident,
        title=title,
        published=str(tracking.get("initial_release_date", ""))[:10],
        updated=str(tracking.get("current_release_date", ""))[:10],
        url=f"{REPOSITORY}/blob/main/{str(tracking.get('initial_release_date', ''))[:4]}/{ident}/{ident}.md",
        cves=cves,
        components=components,
    )


def _affected_ranges(
    doc: Mapping[str, Any], tree: Mapping[str, tuple[str | None, str, str]], title: str, where: tuple[str, str]
) -> list[str]:
    """The upper ends of the affected ranges (``0.0  to 4.8.2``) of a line, to flag a range that reaches its
    own fixed version (the bulletin contradicts itself: the catalogue keeps the fixed version and says so)."""
    ends: set[str] = set()
    for vuln in doc.get("vulnerabilities", []):
        for pid in vuln.get("product_status", {}).get("known_affected", []):
            arch, product, name = tree.get(pid, (None, "", ""))
            if _component(title, arch, product) == where and re.search(r"\bto\b", name) and "prior" not in name:
                found = _VERSION.findall(name)
                if found:
                    ends.add(found[-1])
    return sorted(ends, key=version_key)


def build(source: Path, commit: str | None = None) -> Catalogue:
    """Every bulletin under ``source`` (a checkout of NVIDIA/product-security) the catalogue keeps."""
    bulletins: list[Bulletin] = []
    for path in sorted(source.glob("[0-9][0-9][0-9][0-9]/*/*.json")):
        if path.stem != path.parent.name:
            continue  # the CVE record files beside the CSAF document
        entry = bulletin_of(json.loads(path.read_text()))
        if entry is not None:
            bulletins.append(entry)
    bulletins.sort(key=lambda b: (b.published, b.id), reverse=True)
    return Catalogue(
        source=f"{REPOSITORY}" + (f" at commit {commit}" if commit else " (local copy, commit not given)"),
        generated=datetime.now(timezone.utc).strftime("%Y-%m-%d"),
        bulletins=bulletins,
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="gpuaccept-bulletins", description=__doc__.split("\n")[0])
    parser.add_argument("--source", required=True, type=Path, help="a local checkout of NVIDIA/product-security")
    parser.add_argument("--commit", help="the checkout's commit, recorded in the catalogue")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"where to write (default {DEFAULT_OUT})")
    args = parser.parse_args(argv)
    if not args.source.is_dir():
        print(f"gpuaccept-bulletins: --source {args.source}: not a directory", file=sys.stderr)
        return 2
    catalogue = build(args.source, args.commit)
    args.out.write_text(json.dumps(catalogue.model_dump(mode="json"), indent=1, sort_keys=True) + "\n")
    kept = sum(len(lines) for b in catalogue.bulletins for lines in b.components.values())
    print(f"gpuaccept-bulletins: {len(catalogue.bulletins)} bulletins, {kept} lines -> {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
