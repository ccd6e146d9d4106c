#!/usr/bin/env bash
# `tpserve router` with a grpc:// backend, real processes: replica G (`tpserve serve` on
# gemma-4-tiny, dummy weights) behind the router on its gRPC port, replica H (the same model)
# on its HTTP port. Greedy chats and completions through G's gRPC port, streamed and not, give
# the same tokens as straight to G's HTTP port; a model listing both alternates them; a field the
# gRPC API cannot carry is a 400 naming it (and goes to H where the model lists it); the request
# log and /metrics name the grpc:// backend; G killed, every request goes to H and G is counted
# as a connect error and unhealthy; G restarted on its port, it takes requests again.
# Usage: router_grpc_test.sh TPSERVE_BINARY FIXTURES_DIR   (run by ctest)
set -u
TPSERVE=$1
FIX=$2
source "$(dirname "$0")/harness.sh"
replica_model "$FIX"

start_http G serve "${MODEL[@]}" --grpc-port 0
start_http H serve "${MODEL[@]}" --grpc-port -1
wait_replicas G H
GRPC_G=$(grpc_port G)
G="grpc://127.0.0.1:$GRPC_G"
H="http://127.0.0.1:$PORT_H/v1"
cat >"$WORK/router.json" <<JSON
{"models": {
  "via-grpc": {"backends": [{"url": "$G", "model": "gemma-4-tiny"}]},
  "both": {"policy": "round_robin", "backends": [{"url": "$G", "model": "gemma-4-tiny"},
                                                 {"url": "$H", "model": "gemma-4-tiny"}]}}}
JSON
start_http R router --config "$WORK/router.json" --request-log "$WORK/requests.jsonl"
R="http://127.0.0.1:$PORT_R"

# post URL BODY: the response body in $WORK/body, headers in $WORK/h; prints "STATUS BACKEND".
post() {
  curl -s -m 60 -D "$WORK/h" -o "$WORK/body" -w '%{http_code}' "$1" -H 'Content-Type: application/json' -d "$2" \
    >"$WORK/code"
  echo "$(cat "$WORK/code") $(backend_of "$WORK/h")"
}
# answer FILE: what a client reads off a response body or an SSE stream: each choice's text,
# finish_reason and usage (the last usage chunk of a stream), as one JSON line.
answer() {
  python3 - "$1" <<'PY'
import json, sys
text = open(sys.argv[1]).read()
if text.startswith("data: "):
    chunks = [l[6:] for l in text.split("\n") if l.startswith("data: ")]
    assert chunks[-1] == "[DONE]", chunks[-1]
    out, usage = {}, None
    for c in chunks[:-1]:
        j = json.loads(c)
        assert "error" not in j, j
        usage = j.get("usage") or usage
        for ch in j["choices"]:
            o = out.setdefault(ch["index"], {"text": "", "finish": None})
            o["text"] += ch.get("text", "") or (ch.get("delta", {}).get("content") or "")
            o["finish"] = ch.get("finish_reason") or o["finish"]
    print(json.dumps({"choices": [out[i] for i in sorted(out)], "usage": usage}, sort_keys=True))
else:
    j = json.loads(text)
    choices = [{"text": c.get("text", c.get("message", {}).get("content")), "finish": c["finish_reason"]}
               for c in j["choices"]]
    print(json.dumps({"choices": choices, "usage": j["usage"]}, sort_keys=True))
PY
}

CHAT='"messages":[{"role":"user","content":"Tell me a story"}],"max_tokens":12,"temperature":0'
COMPLETION='"prompt":"Once upon a time","max_tokens":12,"temperature":0,"n":2'
for stream in false true; do
  usage=""
  [ $stream = true ] && usage=',"stream_options":{"include_usage":true}'
  for kind in chat completion; do
    if [ $kind = chat ]; then path=chat/completions body=$CHAT; else path=completions body=$COMPLETION; fi
    got=$(post "$R/v1/$path" "{\"model\":\"via-grpc\",$body,\"stream\":$stream$usage}")
    relayed=$(answer "$WORK/body")
    code=$(post "http://127.0.0.1:$PORT_G/v1/$path" "{\"model\":\"gemma-4-tiny\",$body,\"stream\":$stream$usage}")
    direct=$(answer "$WORK/body")
    [ "$got" = "200 $G" ] && [ "${code%% *}" = 200 ] && [ -n "$relayed" ] && [ "$relayed" = "$direct" ] \
      && ok "$kind (stream $stream) through $G: the same greedy answer as G's HTTP port" \
      || bad "$kind stream $stream: $got: $relayed vs $direct"
  done
done
grep -qi '^content-type: text/event-stream' "$WORK/h" || bad "a stream's content type: $(cat "$WORK/h")"

# A model listing both: round_robin alternates them, with the same greedy tokens.
seen=""
texts=""
for _ in 1 2 3 4; do
  seen="$seen|$(post "$R/v1/chat/completions" "{\"model\":\"both\",$CHAT}")"
  texts="$texts$(answer "$WORK/body")"$'\n'
done
{ [ "$seen" = "|200 $G|200 $H|200 $G|200 $H" ] || [ "$seen" = "|200 $H|200 $G|200 $H|200 $G" ]; } \
  && [ "$(echo -n "$texts" | sort -u | wc -l)" = 1 ] && ok "round_robin alternates the grpc:// and http:// replicas" \
  || bad "both: $seen $texts"

# What the gRPC API cannot carry: 400 naming the field; a model with an http backend takes it there.
got=$(post "$R/v1/chat/completions" '{"model":"via-grpc","messages":[{"role":"user","content":"Hi"}],"chat_template_kwargs":{"enable_thinking":false}}')
[ "$got" = "400 " ] && grep -q '"param":"chat_template_kwargs"' "$WORK/body" \
  && grep -q 'cannot be sent to a gRPC backend' "$WORK/body" && ok "a field the gRPC API cannot carry is a 400 naming it" \
  || bad "400: $got $(cat "$WORK/body")"
seen=""
for _ in 1 2; do
  seen="$seen|$(post "$R/v1/chat/completions" '{"model":"both","messages":[{"role":"user","content":"Hi"}],"max_tokens":2,"chat_template_kwargs":{"enable_thinking":false}}')"
done
[ "$seen" = "|200 $H|200 $H" ] && ok "such a request goes to the model's http:// backend" || bad "skip to http: $seen"

grep -q "\"model\":\"via-grpc\",\"backend\":\"$G\",.*\"status\":200,\"success\":true,\"error\":null,\"prompt_tokens\":[0-9]" \
  "$WORK/requests.jsonl" && ok "the request log names the grpc:// backend, with usage" \
  || bad "request log: $(head -3 "$WORK/requests.jsonl")"

# G killed: every request goes to H; G's failures count as connect errors and it is ejected.
end_session G
seen=""
for _ in 1 2 3; do seen="$seen|$(post "$R/v1/chat/completions" "{\"model\":\"both\",$CHAT}")"; done
got=$(post "$R/v1/completions" '{"model":"via-grpc","prompt":"Hi","max_tokens":2}')
curl -s "$R/metrics" >"$WORK/metrics"
connect=$(metric "tpserve_router_backend_errors_total{model=\"both\",backend=\"$G\",kind=\"connect\"}")
[ "$seen" = "|200 $H|200 $H|200 $H" ] && [ "${got%% *}" = 502 ] && grep -q "$G: gRPC UNAVAILABLE" "$WORK/body" \
  && [ "${connect:-0}" -ge 1 ] \
  && [ "$(metric "tpserve_router_backend_healthy{model=\"both\",backend=\"$G\"}")" = 0 ] \
  && ok "G killed: requests fail over to H ($connect connect error), G unhealthy; alone, it is a 502 saying why" \
  || bad "G killed: $seen / $got $(cat "$WORK/body") / connect $connect: $(grep "$G" "$WORK/metrics" | grep -v bucket)"

# G back on its ports: once its ejection ends, it takes requests again.
ON_PORT=$PORT_G start_http G serve "${MODEL[@]}" --grpc-port "$GRPC_G"
wait_healthy "$PORT_G" || bad "G not healthy after its restart"
back() { [ "$(post "$R/v1/completions" '{"model":"via-grpc","prompt":"Hi","max_tokens":2}')" = "200 $G" ]; }
poll 20 back && ok "G restarted: it answers again" || bad "G restarted: $(cat "$WORK/body")"

router_stops R
finish
