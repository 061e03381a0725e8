"""Writes the `pip install gpuslack` wheel around a binary the floor build already linked
(scripts/dist/build.sh): `gpuslack-VERSION-py3-none-manylinux_2_28_ARCH.whl`, the binary under
`gpuslack-VERSION.data/scripts/`, which pip installs into the environment's `bin/`.

The same layout maturin's `bindings = "bin"` writes, without a second release build of the
workspace (maturin would link the binary again, 2-3 minutes of CI per architecture) and with
nothing but the standard library. Deterministic: entries sorted, every timestamp the
commit's (SOURCE_DATE_EPOCH) or 1980-01-01, so the same binary gives the same wheel.

    python3 scripts/dist/wheel.py BINARY ARCH VERSION SUMMARY OUT_DIR

prints the wheel's path. `auditwheel show` on it names manylinux_2_28_ARCH (tests/dist.rs).
"""
import base64
import hashlib
import os
import sys
import time
import zipfile

# The platform tag the binary's symbol versions allow (GLIBC_2.28 at most: tests/dist.rs).
PLATFORM = "manylinux_2_28"


def record_line(name, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def main(argv):
    if len(argv) != 6:
        sys.exit("usage: wheel.py BINARY ARCH VERSION SUMMARY OUT_DIR")
    binary, arch, version, summary, out_dir = argv[1:]
    if arch not in ("x86_64", "aarch64"):
        sys.exit(f"wheel.py: unknown architecture {arch!r} (x86_64 or aarch64)")
    with open(binary, "rb") as f:
        exe = f.read()
    tag = f"py3-none-{PLATFORM}_{arch}"
    dist_info = f"gpuslack-{version}.dist-info"
    metadata = "\n".join([
        "Metadata-Version: 2.1",
        "Name: gpuslack",
        f"Version: {version}",
        f"Summary: {summary}",
        "License: Apache-2.0",
        "Home-page: https://github.com/gpuslack/gpuslack",
        "Requires-Python: >=3.7",
        "Classifier: Environment :: GPU :: NVIDIA CUDA",
        "Classifier: Operating System :: POSIX :: Linux",
        "Classifier: Programming Language :: Rust",
        "Description-Content-Type: text/markdown",
        "",
        "The `gpuslack` command: tells whether a GPU is really working (NVML + GPM sampling, a",
        "verdict per GPU and window). `gpuslack diagnose -- python train.py` watches a job's GPUs",
        "and prints the report; without a GPU it shows a bundled H200 recording. Linux, x86_64",
        "and aarch64, glibc 2.28 or later; NVML is loaded from the driver at run time.",
        "",
    ])
    wheel = "\n".join([
        "Wheel-Version: 1.0",
        "Generator: gpuslack scripts/dist/wheel.py",
        "Root-Is-Purelib: false",
        f"Tag: {tag}",
        "",
    ])
    files = [
        (f"gpuslack-{version}.data/scripts/gpuslack", exe, 0o755),
        (f"{dist_info}/METADATA", metadata.encode(), 0o644),
        (f"{dist_info}/WHEEL", wheel.encode(), 0o644),
    ]
    record = [record_line(name, data) for name, data, _ in files]
    record.append(f"{dist_info}/RECORD,,")
    files.append((f"{dist_info}/RECORD", ("\n".join(record) + "\n").encode(), 0o644))
    epoch = max(int(os.environ.get("SOURCE_DATE_EPOCH", "315532800")), 315532800)
    stamp = time.gmtime(epoch)[:6]
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, f"gpuslack-{version}-{tag}.whl")
    tmp = path + ".tmp"
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as z:
        # RECORD last, as the wheel spec recommends; the rest in the order above.
        for name, data, mode in files:
            info = zipfile.ZipInfo(name, date_time=stamp)
            info.external_attr = (0o100000 | mode) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, data)
    os.replace(tmp, path)
    print(path)


if __name__ == "__main__":
    main(sys.argv)
