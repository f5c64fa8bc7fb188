#!/usr/bin/env python3
"""Repack a wheel without some of its files, keeping RECORD consistent.

    strip_wheel.py IN.whl OUT.whl GLOB [GLOB...]

Each GLOB (fnmatch, matched against the path inside the wheel) names files to drop.
Used for sglang-kernel: the H200 (sm90) needs sm90/common_ops only; flash_ops (FA3, 1 GiB
unpacked), flashmla_ops and sm100/ are not loaded with attention_backend triton/flashinfer.
"""
import base64
import csv
import fnmatch
import hashlib
import io
import sys
import zipfile


def main(src, dst, globs):
    dropped, kept = [], []
    with zipfile.ZipFile(src) as zin:
        record_name = next(n for n in zin.namelist() if n.endswith(".dist-info/RECORD"))
        with zipfile.ZipFile(dst, "w", compression=zipfile.ZIP_DEFLATED) as zout:
            for info in zin.infolist():
                name = info.filename
                if name == record_name:
                    continue
                if any(fnmatch.fnmatch(name, g) for g in globs):
                    dropped.append((name, info.file_size))
                    continue
                data = zin.read(name)
                zout.writestr(info, data, compress_type=zipfile.ZIP_DEFLATED)
                digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
                kept.append((name, f"sha256={digest}", str(len(data))))
            buf = io.StringIO()
            w = csv.writer(buf, lineterminator="\n")
            for row in kept:
                w.writerow(row)
            w.writerow((record_name, "", ""))
            zout.writestr(record_name, buf.getvalue())
    total = sum(size for _, size in dropped)
    print(f"{src.split('/')[-1]}: dropped {len(dropped)} files, {total / 2**20:.1f} MiB unpacked:")
    for name, size in sorted(dropped, key=lambda x: -x[1])[:5]:
        print(f"  {size / 2**20:8.1f} MiB  {name}")
    if not dropped:
        sys.exit(f"strip_wheel: nothing matched {globs} in {src}")


if __name__ == "__main__":
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2], sys.argv[3:])
