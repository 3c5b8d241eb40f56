"""The smoke check's carry: the pinned wheels a GPU machine's image lacks, fetched and proved closed.

``bench/gpu_carry.txt`` pins each wheel (``name==version``, file, bytes, sha256, and the optional
step it serves, if any); ``bench/device_image.txt`` lists what the GPU machine's image already
holds. :func:`carry_check` proves the carry closed: every ``Requires-Dist`` of every carried wheel,
and every dependency of the project itself (``pyproject.toml``: its dependencies and the
``generate`` extra), evaluated for the GPU machine's CPython 3.12 on Linux x86-64, is met by a
carried wheel or by a package the image lists, at a compatible version where the version is
known; every wheel installs on that interpreter; no name is carried twice (pip refuses two).
"""

from __future__ import annotations

import hashlib
import re
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from email.parser import HeaderParser
from pathlib import Path
from typing import Any

import tomllib
from packaging import tags
from packaging.markers import default_environment
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion, Version

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
LOCK = BENCH / "gpu_carry.txt"
IMAGE = BENCH / "device_image.txt"
DEFAULT_CARRY = REPO / "build" / "gpu-carry"

TARGET_PYTHON = (3, 12)
MANYLINUX_MAX = 39
"""The image's glibc bound for manylinux tags (its CPython 3.12.3 is Ubuntu 24.04's: glibc 2.39)."""
PIP_PLATFORMS = tuple(f"manylinux_2_{n}_x86_64" for n in (17, 24, 27, 28, 31, 34, 35, 39)) + (
    "manylinux2014_x86_64", "manylinux1_x86_64")
PROJECT_EXTRAS = ("generate",)
NOT_FROM_CARRY = frozenset({"torch", "tzdata"})
"""The project's requirements the image provides by construction (its CUDA torch) or that do not
apply (tzdata is Windows-only)."""
OPTIONAL_STEPS_ONLY = frozenset({"optimum-quanto"})
"""Requirements of the ``generate`` extra that only an optional smoke step uses: checked when
carried (``--with-optional``), else left out."""


class CarryError(Exception):
    """A carry file, a wheel or the image list is unusable (the message names it)."""


@dataclass(frozen=True)
class Pin:
    """One carried wheel.

    Attributes:
        name: distribution name (canonical).
        version: exact version.
        wheel: file name.
        size_bytes: its size.
        sha256: its hash (hex).
        optional_step: the optional smoke step it serves (``None``: a required step's).
    """

    name: str
    version: str
    wheel: str
    size_bytes: int
    sha256: str
    optional_step: str | None = None

    @property
    def pin(self) -> str:
        return f"{self.name}=={self.version}"


def read_lock(path: Path = LOCK) -> list[Pin]:
    """The pins of ``path`` (see the module docstring)."""
    pins = []
    for no, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        parts = line.split()
        m = re.fullmatch(r"([A-Za-z0-9_.-]+)==([^\s]+)", parts[0])
        if m is None or len(parts) not in (4, 5) or not parts[2].isdigit() \
                or not parts[3].startswith("sha256:"):
            raise CarryError(f"{path.name}:{no}: expected 'name==version wheel bytes "
                             f"sha256:HASH [step]', got {line!r}")
        pins.append(Pin(canonicalize_name(m.group(1)), m.group(2), parts[1], int(parts[2]),
                        parts[3][len("sha256:"):], parts[4] if len(parts) == 5 else None))
    return pins


def selected(pins: list[Pin], with_optional: bool) -> list[Pin]:
    """The pins that travel: required steps' only, unless ``with_optional``."""
    return [p for p in pins if with_optional or p.optional_step is None]


def read_image(path: Path = IMAGE) -> dict[str, str | None]:
    """The image's packages: canonical name -> version (``None`` where not recorded)."""
    out: dict[str, str | None] = {}  # canonical names
    for no, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        m = re.fullmatch(r"([A-Za-z0-9_.-]+)(?:==(\S+))?", line)
        if m is None:
            raise CarryError(f"{path.name}:{no}: expected 'name' or 'name==version', got {line!r}")
        out[canonicalize_name(m.group(1))] = m.group(2)
    return out


def target_environment(python: str = "3.12.3") -> dict[str, str]:
    """PEP 508 marker values of the GPU machine's interpreter (CPython on Linux x86-64)."""
    env: dict[str, str] = {k: str(v) for k, v in default_environment().items()}
    env.update({"python_version": ".".join(python.split(".")[:2]), "python_full_version": python,
                "implementation_version": python, "implementation_name": "cpython",
                "platform_python_implementation": "CPython", "sys_platform": "linux",
                "platform_system": "Linux", "platform_machine": "x86_64", "os_name": "posix",
                "extra": ""})
    return env


def target_tags(python: tuple[int, int] = TARGET_PYTHON) -> set[tags.Tag]:
    """Wheel tags CPython ``python`` on manylinux x86-64 (glibc up to 2.39) installs."""
    platforms = [f"manylinux_2_{n}_x86_64" for n in range(MANYLINUX_MAX, 4, -1)]
    platforms += ["manylinux2014_x86_64", "manylinux2010_x86_64", "manylinux1_x86_64",
                  "linux_x86_64"]
    return set(tags.cpython_tags(python, platforms=platforms)) | set(
        tags.compatible_tags(python, f"cp{python[0]}{python[1]}", platforms))


def wheel_metadata(path: Path) -> tuple[str, str, list[str]]:
    """``(name, version, Requires-Dist lines)`` of a wheel file."""
    try:
        with zipfile.ZipFile(path) as z:
            meta = next((n for n in z.namelist()
                         if n.endswith(".dist-info/METADATA") and n.count("/") == 1), None)
            if meta is None:
                raise CarryError(f"{path.name}: no .dist-info/METADATA")
            msg = HeaderParser().parsestr(z.read(meta).decode("utf-8"))
    except (zipfile.BadZipFile, OSError, UnicodeDecodeError) as exc:
        raise CarryError(f"{path.name}: not a readable wheel ({exc})") from exc
    return (canonicalize_name(msg["Name"] or ""), str(msg["Version"] or ""),
            list(msg.get_all("Requires-Dist") or []))


def project_requirements(pyproject: Path = REPO / "pyproject.toml") -> list[str]:
    """The project's own dependencies and those of the extras the smoke needs."""
    data = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]
    reqs = list(data["dependencies"])
    for extra in PROJECT_EXTRAS:
        reqs += data["optional-dependencies"][extra]
    return reqs


def _version_ok(req: Requirement, version: str) -> bool:
    try:
        return req.specifier.contains(Version(version), prereleases=True)
    except InvalidVersion:
        return False


def carry_check(folder: Path, image: dict[str, str | None], *, python: str = "3.12.3",
                project: list[str] | None = None) -> dict[str, Any]:
    """Whether the wheels in ``folder`` with the image make a closed environment.

    Args:
        folder: the carry folder (every ``*.whl`` in it travels).
        image: :func:`read_image`.
        python: the GPU machine's interpreter version.
        project: the project's requirements (default :func:`project_requirements`); those in
            :data:`NOT_FROM_CARRY` are left to the image.

    Returns:
        ``{"closed": bool, "problems": [one line each], "wheels": {name: version},
        "requirements_checked": int, "from_image": [the image's packages relied on]}``.
    """
    env = target_environment(python)
    ok_tags = target_tags(tuple(int(x) for x in python.split(".")[:2]))  # type: ignore[arg-type]
    problems: list[str] = []
    carried: dict[str, str] = {}
    requires: list[tuple[str, str]] = []
    wheels = sorted(folder.glob("*.whl"))
    if not wheels:
        problems.append(f"{folder.name}: no wheel in the carry folder")
    for path in wheels:
        try:
            name, version, reqs = wheel_metadata(path)
            _, _, _, wheel_tags = parse_wheel_filename(path.name)
        except (CarryError, ValueError) as exc:
            problems.append(str(exc))
            continue
        if name in carried:
            problems.append(f"{path.name}: {name} is carried twice ({carried[name]} and "
                            f"{version}); pip refuses two versions")
        carried[name] = version
        if not set(wheel_tags) & ok_tags:
            problems.append(f"{path.name}: no tag installs on CPython {python} Linux x86-64")
        requires += [(path.name, r) for r in reqs]
    for req_text in project if project is not None else project_requirements():
        requires.append(("pyproject.toml", req_text))
    checked = 0
    from_image: set[str] = set()
    for origin, text in requires:
        try:
            req = Requirement(text)
        except InvalidRequirement as exc:
            problems.append(f"{origin}: requirement {text!r} does not parse ({exc})")
            continue
        if req.marker is not None and not req.marker.evaluate(env):
            continue
        name = canonicalize_name(req.name)
        if origin == "pyproject.toml" and (name in NOT_FROM_CARRY or (
                name in OPTIONAL_STEPS_ONLY and name not in carried)):
            continue
        checked += 1
        if name in carried:
            if not _version_ok(req, carried[name]):
                problems.append(f"{origin}: requires {text!r}; the carry has {name} "
                                f"{carried[name]}")
        elif name in image:
            from_image.add(name)
            have = image[name]
            if have is not None and not _version_ok(req, have):
                problems.append(f"{origin}: requires {text!r}; the image has {name} {have}")
        else:
            problems.append(f"{origin}: requires {text!r}; neither the carry nor the image has "
                            f"{name}")
    return {"closed": not problems, "problems": problems, "wheels": carried,
            "requirements_checked": checked, "from_image": sorted(from_image)}


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def fetch(pins: list[Pin], dest: Path, *, for_this_python: bool = False) -> list[Path]:
    """Download ``pins`` into ``dest`` with pip (no dependencies) and check each file.

    Any other wheel in ``dest`` is removed: the folder travels whole, so it holds the plan.

    For the GPU machine (default) the files must be exactly the pinned ones (name, size,
    sha256). ``for_this_python``: the same versions for the interpreter running this (the CPU
    rehearsal's); a file that differs from the pinned one (another Python tag) is allowed, its
    version is checked.

    Raises:
        CarryError: pip failed, or a file is not what its pin says.
    """
    dest.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
           "-d", str(dest)]
    if not for_this_python:
        cmd += ["--python-version", "3.12", "--implementation", "cp"]
        for platform in PIP_PLATFORMS:
            cmd += ["--platform", platform]
    proc = subprocess.run(cmd + [p.pin for p in pins], capture_output=True, text=True)
    if proc.returncode != 0:
        tail = " | ".join(proc.stderr.strip().splitlines()[-3:])
        raise CarryError(f"pip download failed (exit {proc.returncode}): {tail}")
    out = []
    for pin in pins:
        path = dest / pin.wheel
        if for_this_python and not path.exists():
            found = [w for w in dest.glob("*.whl") if wheel_metadata(w)[:2] == (pin.name,
                                                                                 pin.version)]
            if not found:
                raise CarryError(f"{dest.name}: no wheel of {pin.pin} after pip download")
            out.append(found[0])
            continue
        if not path.exists():
            raise CarryError(f"{pin.wheel}: pip downloaded another file for {pin.pin}")
        if path.stat().st_size != pin.size_bytes or sha256_of(path) != pin.sha256:
            raise CarryError(f"{pin.wheel}: size or sha256 differs from {LOCK.name}")
        out.append(path)
    for stale in set(dest.glob("*.whl")) - set(out):  # the folder travels whole: only the plan
        stale.unlink()
    return out


def install_command(carry: Path, target: Path, python: str = "python3") -> list[str]:
    """The one install the GPU machine runs: the carry only, no index, no dependencies."""
    return [python, "-m", "pip", "install", "-q", "--no-index", "--find-links", str(carry),
            "--no-deps", "--no-compile", "--no-cache-dir", "--target", str(target),
            *sorted(str(w) for w in carry.glob("*.whl"))]
