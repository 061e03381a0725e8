"""Rotel processor for gpuslack's export tests: writes every metric data point and log record
that reaches the collector as one JSON object per line to $GPUSLACK_COLLECTED, then lets the
data go on unchanged. Runs inside rotel-agent's embedded Python."""
import json
import os

OUT = os.environ["GPUSLACK_COLLECTED"]


def _attrs(kvs):
    out = {}
    for kv in list(kvs):
        v = kv.value.value if kv.value is not None else None
        if not isinstance(v, (str, int, float, bool)) and v is not None:
            try:
                v = v[0]  # AnyValue variants may come as one-element tuples
            except Exception:
                pass
        out[kv.key] = v if isinstance(v, (str, int, float, bool)) or v is None else str(v)
    return out


def _scope(scope_metrics):
    scope = getattr(scope_metrics, "scope", None)
    return {"name": getattr(scope, "name", None), "version": getattr(scope, "version", None),
            "schema_url": getattr(scope_metrics, "schema_url", None)}


def _write(records):
    with open(OUT, "a") as f:
        for r in records:
            f.write(json.dumps(r) + "\n")


def process_metrics(resource_metrics):
    resource = _attrs(resource_metrics.resource.attributes) if resource_metrics.resource else {}
    records = []
    for sm in list(resource_metrics.scope_metrics):
        for m in list(sm.metrics):
            data = m.data
            kind = type(data).__name__.replace("MetricData_", "")
            inner = data[0]
            rec = {"signal": "metric", "name": m.name, "unit": m.unit, "kind": kind, "resource": resource,
                   "scope": _scope(sm)}
            if kind == "Sum":
                rec["temporality"] = str(inner.aggregation_temporality)
                rec["monotonic"] = bool(inner.is_monotonic)
            points = []
            for dp in list(inner.data_points):
                points.append({"attributes": _attrs(dp.attributes), "value": float(dp.value[0]),
                               # AsInt or AsDouble: the type the exporter sent
                               "value_type": type(dp.value).__name__,
                               "time": dp.time_unix_nano, "start": dp.start_time_unix_nano})
            rec["points"] = points
            records.append(rec)
    _write(records)


def process_logs(resource_logs):
    resource = _attrs(resource_logs.resource.attributes) if resource_logs.resource else {}
    records = []
    for sl in list(resource_logs.scope_logs):
        for lr in list(sl.log_records):
            body = lr.body.value if lr.body is not None else None
            if not isinstance(body, (str, int, float, bool)) and body is not None:
                try:
                    body = body[0]
                except Exception:
                    pass
            records.append({"signal": "log", "body": str(body), "severity": lr.severity_text,
                            "event": lr.event_name, "attributes": _attrs(lr.attributes), "resource": resource})
    _write(records)
