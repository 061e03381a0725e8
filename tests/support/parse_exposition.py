"""Parses a Prometheus exposition from stdin with prometheus_client's parsers, which stop at
what Prometheus itself lets through (a family whose HELP and TYPE name it differently, a sample
outside its family): FORMAT is `openmetrics` (prometheus_client.openmetrics.parser, strict) or
`text` (the 0.0.4 text format). Prints one JSON object: the families, the samples and every
label name seen; a parse error ends it with a traceback and exit status 1.

Usage: parse_exposition.py FORMAT < exposition"""
import json
import sys

from prometheus_client.openmetrics.parser import text_string_to_metric_families as openmetrics
from prometheus_client.parser import text_string_to_metric_families as text

parse = {"openmetrics": openmetrics, "text": text}[sys.argv[1]]
families = list(parse(sys.stdin.read()))
print(json.dumps({
    "families": len(families),
    "samples": sum(len(f.samples) for f in families),
    "labels": sorted({k for f in families for s in f.samples for k in s.labels}),
    "names": sorted({f.name for f in families}),
}))
