#!/bin/sh
# `rlpost info` prints the architecture description (rlp_model_info version
# 2): for llama2.c's stories260K (Llama: SwiGLU, no q/k norm, no window) and,
# when fetched (scripts/fetch-model.sh gemma3-270m), the real Gemma 3 270M
# GGUF (GeGLU, q/k and post-norms, norm offset 1, embedding scale sqrt(640),
# attention scale 1/16, window 512 on 15 of 18 layers, local RoPE base 1e4).
# The head of value and reward model folders (the committed fixtures:
# score labels, sequence or token classification). Skips when neither
# stories260K nor Gemma is there.
# Usage: check_info_cli.sh RLPOST SOURCE_ROOT
set -u
rlpost=$1
stories="$2/../shared/data/llama2c/stories260K.bin"
gemma="${RLPOST_MODEL_DIR:-$2/models}/gemma-3-270m-q4_k_m.gguf"
command -v python3 >/dev/null 2>&1 || { echo "python3 not found: skipped"; exit 77; }
[ -f "$stories" ] || [ -f "$gemma" ] || { echo "no $stories nor $gemma: skipped"; exit 77; }
fail() { echo "FAIL: $*"; exit 1; }
if [ -f "$stories" ]; then
    "$rlpost" info "$stories" | python3 -c '
import json, sys
d = json.load(sys.stdin)
assert d["architecture"] == "llama" and d["activation"] == "silu", d
assert d["qk_norm"] is False and d["post_norms"] is False and d["norm_offset"] == 0, d
assert d["sliding_window"] == 0 and d["n_local_layers"] == 0 and d["final_softcap"] == 0, d
assert d["score_labels"] == 0 and d["head"] == "lm", d
assert abs(d["attn_scale"] - d["head_dim"] ** -0.5) < 1e-5, d
' || fail "info on stories260K"
fi
if [ -f "$gemma" ]; then
    "$rlpost" info "$gemma" | python3 -c '
import json, sys
d = json.load(sys.stdin)
assert d["architecture"] == "gemma3" and d["activation"] == "gelu_tanh", d
assert d["qk_norm"] is True and d["post_norms"] is True and d["norm_offset"] == 1, d
assert abs(d["embed_scale"] - 640 ** 0.5) < 1e-3 and d["attn_scale"] == 0.0625, d
assert d["sliding_window"] == 512 and d["n_local_layers"] == 15 and d["rope_theta_local"] == 10000, d
assert d["head_dim"] == 256 and d["n_layers"] == 18 and d["tokenizer"]["vocab_size"] == 262144, d
' || fail "info on Gemma 3 270M"
fi
# the head of a reward model's folder (committed fixtures: always run)
"$rlpost" info "$2/tests/reference/fixtures/hf/rm_orm" | python3 -c '
import json, sys
d = json.load(sys.stdin)
assert d["score_labels"] == 1 and d["head"] == "sequence_classification" and d["format"] == "hf", d
' || fail "info on an ORM folder"
"$rlpost" info "$2/tests/reference/fixtures/hf/score_qwen2_prm2" | python3 -c '
import json, sys
d = json.load(sys.stdin)
assert d["score_labels"] == 2 and d["head"] == "token_classification", d
' || fail "info on a PRM folder"
echo "ok"
