#!/usr/bin/env python3
"""Build step: embeds a text file into C++ as `std::string_view NAME()` (used for the defaults)."""
import sys

src, out, namespace, function = sys.argv[1:5]
text = open(src, encoding="utf-8").read()
delim = "tandem_embed"
assert ")" + delim not in text
with open(out, "w", encoding="utf-8") as f:
    f.write("// Generated from %s by tools/embed_text.py; do not edit.\n" % src.split("/")[-1])
    f.write("#include <string_view>\n")
    f.write("namespace %s {\n" % namespace)
    f.write("std::string_view %s() {\n" % function)
    f.write('    static constexpr std::string_view text = R"%s(%s)%s";\n' % (delim, text, delim))
    f.write("    return text;\n}\n}\n")
