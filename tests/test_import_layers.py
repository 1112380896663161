"""The import-linter contracts in ``pyproject.toml`` place every module: a new module, or a new import that makes a
circle inside a package, fails ``make test``'s ``lint-imports``."""

from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: import-linter brings tomli there
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ["analysis", "book", "core", "pipeline", "probing"]


def _contracts() -> list[dict]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["importlinter"]["contracts"]


def _placed(layers: list[str]) -> list[str]:
    return [name.strip() for layer in layers for name in layer.replace("|", ":").split(":")]


def test_every_module_of_a_package_sits_in_exactly_one_layer_of_its_contract():
    by_container = {contract["containers"][0]: contract for contract in _contracts() if "containers" in contract}
    assert sorted(by_container) == [f"papa.{package}" for package in PACKAGES]
    for package in PACKAGES:
        folder = ROOT / "papa" / package
        modules = {p.stem for p in folder.glob("*.py") if p.stem != "__init__"}
        modules |= {p.parent.name for p in folder.glob("*/__init__.py")}
        placed = _placed(by_container[f"papa.{package}"]["layers"])
        assert sorted(placed) == sorted(modules), package


def test_the_packages_contract_places_every_package_and_the_cli():
    (top,) = [contract for contract in _contracts() if "containers" not in contract]
    assert sorted(_placed(top["layers"])) == sorted([f"papa.{package}" for package in PACKAGES] + ["papa.cli"])
