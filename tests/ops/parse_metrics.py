#!/usr/bin/env python3
"""Parses a Prometheus text page (format 0.0.4) with prometheus_client's
parser, an implementation independent of strata's, and prints what it read:

  family NAME TYPE HELP-as-JSON
  sample NAME LABELS-as-sorted-JSON VALUE

one per line, for the C++ test to compare with what it rendered.
Exit status: 0 parsed, 1 the page did not parse, 77 prometheus_client absent.
"""
import json
import math
import sys


def main():
    try:
        from prometheus_client.parser import text_string_to_metric_families
    except ImportError:
        print("SKIP: prometheus_client is not installed (scripts/install-test-tools.sh)")
        return 77
    text = open(sys.argv[1], encoding="utf-8").read()
    try:
        for family in text_string_to_metric_families(text):
            print("family", family.name, family.type, json.dumps(family.documentation))
            for s in family.samples:
                v = s.value
                if math.isnan(v):
                    value = "NaN"
                elif math.isinf(v):
                    value = "+Inf" if v > 0 else "-Inf"
                else:
                    value = repr(float(v))
                print("sample", s.name, json.dumps(s.labels, sort_keys=True), value)
    except Exception as e:  # the parser's own error: the page is malformed
        print(f"parse error: {e}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
