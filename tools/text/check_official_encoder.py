#!/usr/bin/env python3
"""Random conversations rendered by DeepSeek's own encoding/encoding_dsv4.py, for checking
render_messages_official() on cases that are not stored in the repo.

The encoder ships with the model (huggingface.co/deepseek-ai/DeepSeek-V4-Flash, encoding/), not
on PyPI, so pass its path:

    python3 tools/text/check_official_encoder.py --encoder /path/to/encoding_dsv4.py \
        --seed 9 --count 3000 --out /tmp/official_rand.json
    TANDEM_OFFICIAL_CORPUS=/tmp/official_rand.json build/test/unit_tests -tc='chat: official*'

Covers system/developer tools and response_format, latest_reminder, tasks, merged tool results
in shuffled order, wo_eos, thinking/chat, drop_thinking on/off and reasoning_effort.
"""
import argparse
import copy
import importlib.util
import json
import random

ap = argparse.ArgumentParser()
ap.add_argument("--encoder", required=True)
ap.add_argument("--seed", type=int, default=1)
ap.add_argument("--count", type=int, default=500)
ap.add_argument("--out", default="/tmp/official_rand.json")
cli = ap.parse_args()
spec = importlib.util.spec_from_file_location("encoding_dsv4", cli.encoder)
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
encode_messages = module.encode_messages
rng = random.Random(cli.seed)
TEXTS=["hello","你好","<think>x</think>","line\n\n","｜DSML｜","  "," json ","", "é\u2028"]
def t(): return "".join(rng.choice(TEXTS) for _ in range(rng.randint(0,3)))
TOOL={"type":"function","function":{"name":"f","description":"d","parameters":{"type":"object","properties":{"a":{"type":"number","enum":[1.0,2.5e-8,1e22]}}}}}
def args():
    return rng.choice(['{"a": "x"}','{}','not json','{"n": 1.5, "o": {"k": [1, null, true]}, "s": "q\\"\\n"}','{"a":1e-5,"b":-0.0}'])
cases=[]
while len(cases) < cli.count:
    msgs=[]; cid=0; pending=[]
    if rng.random()<0.6:
        m={"role":"system","content":t() or "sys"}
        if rng.random()<0.3: m["tools"]=[TOOL]
        if rng.random()<0.2: m["response_format"]={"type":"json_schema","schema":{"type":"object","x":1e-7}}
        msgs.append(m)
    for _ in range(rng.randint(1,4)):
        r=rng.random()
        if r<0.1: msgs.append({"role":"latest_reminder","content":t() or "lr"})
        if rng.random()<0.15:
            m={"role":"developer","content":t() or "dev"}
            if rng.random()<0.4: m["tools"]=[TOOL]
            msgs.append(m)
        else:
            m={"role":"user","content":t()}
            if rng.random()<0.1: m["task"]=rng.choice(["action","query","title","read_url"])
            msgs.append(m)
            if rng.random()<0.2: msgs.append({"role":"user","content":t()})
        for _ in range(rng.randint(0,2)):
            a={"role":"assistant","content":t()}
            if rng.random()<0.6: a["reasoning_content"]=t()
            calls=[]
            if rng.random()<0.4:
                for _ in range(rng.randint(1,3)):
                    cid+=1; calls.append({"id":f"c{cid}","type":"function","function":{"name":"f","arguments":args()}})
                a["tool_calls"]=calls
            if rng.random()<0.1: a["wo_eos"]=True
            msgs.append(a)
            order=calls[:]; rng.shuffle(order)
            for c in order: msgs.append({"role":"tool","tool_call_id":c["id"],"content":t()})
    opts={"thinking": rng.random()<0.6, "drop_thinking": rng.random()<0.7, "effort": rng.choice([None,"max","high"])}
    try:
        out=encode_messages(copy.deepcopy(msgs), thinking_mode="thinking" if opts["thinking"] else "chat", drop_thinking=opts["drop_thinking"], reasoning_effort=opts["effort"])
    except Exception as e:
        continue
    o={k:v for k,v in opts.items() if v is not None}
    cases.append({"name":f"r{len(cases)}","options":o,"messages":msgs,"expected":out})
json.dump({"cases": cases}, open(cli.out, "w"), ensure_ascii=False)
print(len(cases))
