"""The Prometheus backfill's bulk decode path (a real loopback server for the queries): ``points_from_results`` +
``series_long_to_wide`` give exactly what the per-sample path (``long_from_results`` + ``long_to_wide``)
gives, on results with job copies of a series, MIG instances, gaps, blanks and refused values."""

from __future__ import annotations

import random
from urllib.parse import parse_qs, urlsplit

import orjson
import polars as pl
import pytest
import requests
from polars.testing import assert_frame_equal

from gpuledger.deadlines import CallDeadline
from gpuledger.ingest.metrics.exposition import long_to_wide, series_long_to_wide
from gpuledger.ingest.metrics.prometheus.chunk import query_chunk_all_raw
from gpuledger.ingest.metrics.prometheus.client import PrometheusError, query_chunk_all
from gpuledger.ingest.metrics.prometheus.decode import (
    NotPlainMatrix,
    long_from_results,
    points_from_matrix_json,
    points_from_results,
)
from tests.helpers.hostile_servers import HostileServer, http_answer

METRICS = ("DCGM_FI_PROF_SM_ACTIVE", "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE",
           "DCGM_FI_DEV_FB_RESERVED", "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION")
T0 = 1_796_040_000


def _value(rng: random.Random, metric: str) -> str:
    roll = rng.random()
    if roll < 0.02:
        return rng.choice(["NaN", "+Inf", "-1"])  # refused
    if roll < 0.04:
        return "9.999999e+300" if "SM_ACTIVE" in metric else "2147483647"  # DCGM blanks -> NULL
    if "SM_ACTIVE" in metric:
        return repr(round(rng.random(), 3))
    return str(rng.randint(0, 700))


def _results(seed: int) -> dict[str, list[dict]]:
    rng = random.Random(seed)
    devices = []
    for g in range(6):
        mig = ["-1"] if g % 3 else ["1", "2", "9"]
        for m in mig:
            labels = {"UUID": f"GPU-{g}", "Hostname": f"node-{g // 4}", "gpu": str(g % 4),
                      "instance": f"node-{g // 4}:9400", "job": "dcgm", "modelName": "NVIDIA H100 80GB HBM3"}
            if m != "-1":
                labels |= {"GPU_I_ID": m, "GPU_I_PROFILE": "3g.40gb"}
            devices.append(labels)
    results: dict[str, list[dict]] = {m: [] for m in METRICS}
    for labels in devices:
        # 0-3 job copies of the device's series (Slurm hpc_job or Kubernetes pod), each with gaps
        copies = [{}] if rng.random() < 0.3 else [
            rng.choice([{"hpc_job": str(rng.randint(1, 9))},
                        {"pod": f"p{rng.randint(1, 3)}", "namespace": rng.choice(["a", "b"])}])
            for _ in range(rng.randint(1, 3))]
        copies = [dict(c) for c in {tuple(sorted(c.items())) for c in map(dict, copies)}]  # distinct series
        copies.sort(key=lambda c: sorted(c.items()))
        for metric in METRICS:
            for extra in copies:
                steps = [T0 + 30 * k for k in range(40) if rng.random() > 0.15]
                results[metric].append({"metric": {"__name__": metric, **labels, **extra},
                                        "values": [[t, _value(rng, metric)] for t in steps]})
    return results


def test_bulk_path_matches_the_per_sample_path():
    for seed in range(8):
        results = _results(seed)
        long, rejects = long_from_results(results, url="http://p")
        points, series, rejects_bulk = points_from_results(results, url="http://p")
        assert rejects == rejects_bulk and rejects
        slow = long_to_wide(long)
        fast = series_long_to_wide(points, series)
        assert sorted(fast.columns) == sorted(slow.columns)
        assert_frame_equal(fast.select(slow.columns), slow)


def test_float_timestamps_and_empty_results():
    results = {"DCGM_FI_DEV_GPU_UTIL": [{"metric": {"UUID": "GPU-1", "Hostname": "n1"},
                                         "values": [[T0 + 0.5, "50"], [T0 + 30, "60"]]}]}
    points, series, _ = points_from_results(results, url="http://p")
    assert points["ts"].dt.epoch("ms").to_list() == [T0 * 1000 + 500, (T0 + 30) * 1000]
    wide = series_long_to_wide(points, series)
    assert wide["gpu_util_ratio"].to_list() == [0.5, 0.6]
    empty, series, _ = points_from_results({"DCGM_FI_DEV_GPU_UTIL": []}, url="http://p")
    assert series_long_to_wide(empty, series).is_empty()
    assert isinstance(series_long_to_wide(empty, series), pl.DataFrame)


class _Prometheus(HostileServer):
    """A real loopback server answering every query with one matrix body; it records the queries."""

    def __init__(self, result):
        self.body = orjson.dumps({"status": "success", "data": {"resultType": "matrix", "result": result}})
        self.params = []
        super().__init__(self._answer)

    def _answer(self, line: str, _raw: bytes) -> bytes:
        query = parse_qs(urlsplit(line.split(" ")[1]).query)
        self.params.append({k: (int(v[0]) if v[0].isdigit() else v[0]) for k, v in query.items()})
        return http_answer(self.body)


LIMITS = {"deadline": CallDeadline(connect_s=2, read_s=5, total_s=10), "retries": 0, "backoff_s": 0}


def test_one_query_for_all_metrics_and_the_fallback_when_the_name_is_dropped():
    series = {"metric": {"__name__": "DCGM_FI_DEV_GPU_UTIL", "UUID": "GPU-1", "Hostname": "n1"},
              "values": [[T0, "5"]]}
    with _Prometheus([series]) as server:
        got = query_chunk_all(requests.Session(), server.url, ["DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_POWER_USAGE"],
                              T0, T0 + 60, 30, **LIMITS)
    assert got == {"DCGM_FI_DEV_GPU_UTIL": [series], "DCGM_FI_DEV_POWER_USAGE": []}
    assert server.params == [{"query": 'last_over_time({__name__=~"DCGM_FI_DEV_GPU_UTIL|DCGM_FI_DEV_POWER_USAGE"}'
                                       '[29999ms])', "start": T0, "end": T0 + 30, "step": 30}]
    with _Prometheus([{"metric": {"UUID": "GPU-1", "Hostname": "n1"}, "values": [[T0, "5"]]}]) as nameless:
        assert query_chunk_all(requests.Session(), nameless.url, ["DCGM_FI_DEV_GPU_UTIL"], T0, T0 + 60, 30,
                               **LIMITS) is None


def _body(results: dict[str, list[dict]], **extra) -> bytes:
    flat = [s for series in results.values() for s in series]
    return orjson.dumps({"status": "success", "data": {"resultType": "matrix", "result": flat}, **extra})


def _same_wide(a, b) -> None:
    wa, wb = series_long_to_wide(a[0], a[1]), series_long_to_wide(b[0], b[1])
    assert_frame_equal(wa.select(sorted(wa.columns)), wb.select(sorted(wb.columns)))
    assert sorted(map(repr, a[2])) == sorted(map(repr, b[2]))


def test_bulk_json_reader_matches_the_generic_decoder():
    for seed in range(4):
        results = _results(seed)
        # float timestamps, an exporter without a device identity (refused), an empty result
        results["DCGM_FI_DEV_GPU_UTIL"].append({"metric": {"__name__": "DCGM_FI_DEV_GPU_UTIL", "gpu": "0"},
                                                "values": [[T0 + 0.25, "5"], [T0 + 30.5, "6"]]})
        results["DCGM_FI_DEV_GPU_UTIL"][0]["values"][0][0] = T0 + 0.125
        got = points_from_matrix_json(_body(results), METRICS, url="http://p")
        _same_wide(got, points_from_results(results, url="http://p"))
    assert points_from_matrix_json(_body({}), METRICS, url="http://p")[0].is_empty()


def test_bulk_json_reader_is_exact_for_awkward_label_values_and_refuses_unusual_bodies():
    results = _results(1)
    # JSON escapes every '"' inside a string, so the separators the reader splits on cannot occur there
    for k, pod in enumerate(['we"ird]]},{"metric":{', '},"values":[[', "a}b\\n{ü"]):
        results["DCGM_FI_DEV_FB_USED"][k]["metric"]["pod"] = pod
    _same_wide(points_from_matrix_json(_body(results), METRICS, url="http://p"),
               points_from_results(results, url="http://p"))
    for body in (_body(_results(2), warnings=["x"]), b'{"status":"error","error":"bad"}',
                 _body({"x": [{"metric": {"__name__": "DCGM_FI_DEV_FB_USED"}, "values": [[T0, "5"]],
                               "histograms": []}]})):
        with pytest.raises(NotPlainMatrix):
            points_from_matrix_json(body, METRICS, url="http://p")
    nameless = _body({"x": [{"metric": {"UUID": "GPU-1", "Hostname": "n1"}, "values": [[T0, "5"]]}]})
    assert points_from_matrix_json(nameless, METRICS, url="http://p") is None


def test_raw_query_uses_the_generic_decoder_for_an_unusual_body():
    results = _results(3)
    flat = [s for series in results.values() for s in series]
    with _Prometheus(flat) as server:
        # valid JSON the bulk reader does not take (Prometheus 3's info annotations)
        server.body = server.body[:-1] + b',"infos":["i"]}'
        got = query_chunk_all_raw(requests.Session(), server.url, list(METRICS), T0, T0 + 1200, 30, **LIMITS)
    _same_wide(got, points_from_results(results, url=server.url))


def test_a_partial_answer_is_an_error_not_a_hole():
    # Thanos / Mimir add "warnings" when a store did not answer: the range must stay undone (issue 20)
    results = _results(3)
    flat = [s for series in results.values() for s in series]
    with _Prometheus(flat) as server:
        server.body = server.body[:-1] + b',"warnings":["store 10.0.0.7:10901: deadline exceeded"]}'
        with pytest.raises(PrometheusError, match=r"partial answer \(warnings: store 10\.0\.0\.7:10901"):
            query_chunk_all_raw(requests.Session(), server.url, list(METRICS), T0, T0 + 1200, 30, **LIMITS)
