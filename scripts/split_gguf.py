#!/usr/bin/env python3
"""Splits a GGUF into parts as llama.cpp's gguf-split names and marks them
(NAME-00001-of-0000N.gguf, split.no 0-based, split.count, split.tensors.count
in every part), with the gguf package's GGUFWriter: the metadata (every key,
its type kept) in the first part, tensors in file order, at most
--max-tensors per part. For tests of split models on every path
(tests/cluster/cluster_test.py --scenario split-parts).

Usage: split_gguf.py IN.gguf OUT_PREFIX --max-tensors N
  writes OUT_PREFIX-00001-of-0000N.gguf ... and prints their paths.
"""
import argparse
import sys

import gguf


def copy_metadata(reader, writer):
    """Every key of `reader` but the header's and general.architecture (the
    writer sets those), with its GGUF type."""
    for key, field in reader.fields.items():
        if key.startswith("GGUF.") or key == "general.architecture":
            continue
        vtype = field.types[0]
        if vtype == gguf.GGUFValueType.ARRAY:
            sub = field.types[-1]
            if len(field.types) != 2:
                raise ValueError(f"{key}: nested arrays are not copied")
            writer.add_key_value(key, field.contents(), vtype, sub_type=sub)
        else:
            writer.add_key_value(key, field.contents(), vtype)


def split(src, prefix, max_tensors):
    reader = gguf.GGUFReader(src)
    arch = reader.fields["general.architecture"].contents()
    writer = gguf.GGUFWriter(prefix + ".gguf", arch, split_max_tensors=max_tensors)
    copy_metadata(reader, writer)
    for t in reader.tensors:
        # The data as the reader maps it (quantized types as rows of bytes,
        # which GGUFWriter turns back into elements), with its ggml type.
        writer.add_tensor(t.name, t.data, raw_dtype=t.tensor_type)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    n = len(writer.tensors)  # one tensor dict per part
    writer.close()
    return [gguf.gguf_writer.SHARD_NAME_FORMAT.format(prefix, i + 1, n) for i in range(n)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("src")
    ap.add_argument("prefix")
    ap.add_argument("--max-tensors", type=int, required=True)
    args = ap.parse_args()
    for path in split(args.src, args.prefix, args.max_tensors):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
