"""label.py's rule at its thresholds, and its files. usage: python3 -m unittest test_label (in this folder)"""
import json
import os
import sys
import tempfile
import unittest
from types import SimpleNamespace

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import label  # noqa: E402

LAT, CB, MB = "latency_bound", "compute_bound", "memory_bound"


def args(**kw):
    base = dict(skip_start_s=2.0, skip_end_s=0.5, ncu_count=150, tdp_w=700.0, map=[], out=None,
                no_readme=False, check=None)
    base.update(kw)
    return SimpleNamespace(**base)


class Rule(unittest.TestCase):
    def test_below_the_band_is_latency_alone(self):
        self.assertEqual(label.classes(54.9, 54.9), [LAT])
        self.assertEqual(label.classes(33.1, 29.3), [LAT])  # h100-everyday's scatter

    def test_the_band_accepts_both_sides(self):
        for v in (55.0, 59.9, 60.0, 64.9):
            self.assertEqual(label.classes(v, 10), [CB, LAT], v)
            self.assertEqual(label.classes(10, v), [MB, LAT], v)

    def test_at_the_band_top_the_unit_binds_alone(self):
        self.assertEqual(label.classes(65.0, 17.3), [CB])
        self.assertEqual(label.classes(25.0, 68.9), [MB])  # h100-everyday's sort

    def test_two_binding_units_come_higher_first(self):
        self.assertEqual(label.classes(70, 90), [MB, CB])
        self.assertEqual(label.classes(62, 58), [CB, MB, LAT])

    def test_memory_throughput_is_not_dram(self):
        # fp32 GEMM of h100-everyday: memory 59.7 (L1/L2), DRAM 6.8: compute-bound only.
        self.assertEqual(label.classes(87.2, 6.8), [CB])


class Files(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp()
        self.phases = [
            {"name": "scatter_job", "t0": 100.0, "t1": 112.3, "gpus": [0], "accept": [MB], "why": "guess"},
            {"name": "held_job", "t0": 120.0, "t1": 132.0, "gpus": [0], "accept": ["idle_held"], "why": "a prompt"},
            {"name": "llm", "t0": 140.0, "t1": 152.0, "gpus": [0], "accept": [CB], "what": "training"},
        ]
        self.sol = {"scatter": {"kernels": 10, "us": 1.0, "compute": 33.1, "memory": 29.3, "dram": 29.3},
                    "llm": {"kernels": 150, "us": 1.0, "compute": 61.0, "memory": 50.0, "dram": 20.0}}
        self.write("phases.json", self.phases)
        self.write("sol.json", self.sol)

    def write(self, name, obj):
        with open(os.path.join(self.dir, name), "w") as f:
            json.dump(obj, f)

    def test_segments_rule_and_fallback(self):
        labels, rows = label.label(self.dir, args())
        segs = {s["scenario"]: s for s in labels["segments"]}
        self.assertEqual((segs["scatter_job"]["start"], segs["scatter_job"]["end"]), (102.0, 111.8))
        self.assertEqual(segs["scatter_job"]["accept"], [LAT])  # ncu, not jobs.py's guess
        self.assertEqual(segs["held_job"]["accept"], ["idle_held"])  # not profiled: jobs.py's
        self.assertEqual(segs["llm"]["accept"], [CB, LAT])
        self.assertEqual(labels["tdp_w"], 700.0)
        cells = {r[0]: r for r in rows}
        self.assertIn("a prompt", cells["held_job"][1])
        self.assertIn("perhaps part of a step", cells["llm (training)"][1])  # 150 = -c, no kernels.json

    def test_kernels_json_names_the_share_seen(self):
        self.write("kernels.json", {"llm": {"kernels": 212, "gpu_us": 1.0}})
        _, rows = label.label(self.dir, args())
        self.assertEqual(rows[2][1], "first 150 of 212 kernels of a step")

    def test_readme_block_is_replaced_not_repeated(self):
        with open(os.path.join(self.dir, "README.md"), "w") as f:
            f.write("# mine\n\nkept\n")
        _, rows = label.label(self.dir, args())
        label.write_readme(self.dir, rows)
        label.write_readme(self.dir, rows)
        text = open(os.path.join(self.dir, "README.md")).read()
        self.assertTrue(text.startswith("# mine\n\nkept\n"))
        self.assertEqual(text.count(label.BEGIN), 1)
        self.assertIn("| scatter_job | 33 / 29 / 29 | latency_bound |", text)

    def test_a_missing_field_names_file_phase_and_field(self):
        del self.phases[1]["t1"]
        self.write("phases.json", self.phases)
        with self.assertRaises(label.LabelError) as e:
            label.label(self.dir, args())
        self.assertIn("phases.json: phase 1 (held_job): `t1` must be a number", str(e.exception))

    def test_an_ambiguous_ncu_key_asks_for_map(self):
        self.sol["job"] = self.sol.pop("scatter")
        self.write("sol.json", self.sol)
        with self.assertRaises(label.LabelError) as e:
            label.label(self.dir, args())
        self.assertIn("--map job=PHASE", str(e.exception))
        labels, _ = label.label(self.dir, args(map=["job=scatter_job"]))
        self.assertEqual(labels["segments"][0]["accept"], [LAT])

    def test_a_key_of_no_phase_is_left_out(self):
        self.sol["gone_job"] = dict(self.sol["llm"])
        self.write("sol.json", self.sol)
        labels, _ = label.label(self.dir, args())
        self.assertEqual([s["scenario"] for s in labels["segments"]], ["scatter_job", "held_job", "llm"])

    def test_main_exits_1_on_bad_input(self):
        self.assertEqual(label.main([os.path.join(self.dir, "nowhere")]), 1)


if __name__ == "__main__":
    unittest.main()
