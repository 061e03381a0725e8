"""Duration-weighted Nsight Compute speed-of-light from `ncu --section SpeedOfLight --csv` output
split by '### NAME' lines (copied from the shared tools' sol.py, which does not travel to the
device machine; --per-kernel added).

usage: python3 sol.py NCU.csv               -> JSON {block: {kernels, us, compute, memory, dram}}
       python3 sol.py --per-kernel NCU.csv  -> JSON {kernel name: {...}} over every block, with
                                               the DRAM bytes when the metrics were collected
Throughputs are % of peak, weighted by each kernel's duration."""
import collections
import csv
import io
import json
import sys

UNIT_US = {'ns': 1e-3, 'nsecond': 1e-3, 'us': 1, 'usecond': 1, 'ms': 1e3, 'msecond': 1e3, 's': 1e6, 'second': 1e6}
THROUGHPUTS = (('compute', 'Compute (SM) Throughput'), ('memory', 'Memory Throughput'), ('dram', 'DRAM Throughput'),
               ('l2', 'L2 Cache Throughput'))
BYTE_UNITS = {'byte': 1, 'Kbyte': 1e3, 'Mbyte': 1e6, 'Gbyte': 1e9, 'Tbyte': 1e12, 'KB': 1e3, 'MB': 1e6, 'GB': 1e9}


def number(text):
    return float(text.replace(',', ''))


def launches(block):
    """Each profiled launch of a block: its kernel name and {metric: (value, unit)}."""
    lines = [l for l in block.split('\n') if l.startswith('"')]
    found = collections.OrderedDict()
    for r in csv.DictReader(io.StringIO('\n'.join(lines))):
        if r.get('Metric Name'):
            entry = found.setdefault(r['ID'], (r.get('Kernel Name', '?'), {}))
            entry[1][r['Metric Name']] = (r['Metric Value'], r['Metric Unit'])
    return list(found.values())


def weighted(group):
    total = 0.0
    acc = collections.Counter()
    n = 0
    dram_bytes = 0.0
    has_bytes = False
    for metrics in group:
        if 'Duration' not in metrics:
            continue
        d, u = metrics['Duration']
        d = number(d) * UNIT_US.get(u, 1)
        total += d
        n += 1
        for short, key in THROUGHPUTS:
            if key in metrics:
                acc[short] += d * number(metrics[key][0])
        for key in ('dram__bytes_read.sum', 'dram__bytes_write.sum'):
            if key in metrics:
                value, unit = metrics[key]
                dram_bytes += number(value) * BYTE_UNITS.get(unit, 1)
                has_bytes = True
    if not total:
        return None
    out = {'kernels': n, 'us': round(total, 1)}
    out.update({short: round(acc[short] / total, 1) for short, key in THROUGHPUTS
                if any(key in m for m in group)})
    if has_bytes:
        out['dram_bytes_per_launch'] = round(dram_bytes / n)
    return out


def main(argv):
    per_kernel = '--per-kernel' in argv
    paths = [a for a in argv if a != '--per-kernel']
    if len(paths) != 1:
        sys.exit(__doc__)
    text = open(paths[0]).read()
    groups = collections.OrderedDict()
    for block in text.split('### ')[1:]:
        name = block.split('\n', 1)[0].strip()
        for kernel, metrics in launches(block):
            groups.setdefault(kernel if per_kernel else name, []).append(metrics)
    result = {}
    for name, group in groups.items():
        summary = weighted(group)
        if summary:
            result[name] = summary
    print(json.dumps(result, indent=1))


if __name__ == '__main__':
    main(sys.argv[1:])
