// The engine's side of a /tokenize call, second half: the rendered prompt
// encoded by Hugging Face tokenizers (the Rust library, through its Node
// binding), as vLLM's API server encodes it (no special tokens added: the
// template wrote them). Run by .ci/engine-tokenize-cost.sh:
//
//   node cost.js NODE_MODULES TOKENIZER_JSON REPS < rendered.jsonl
//
// For each line of cost.py's output it prints the context, the tokens
// (hftok's count and the Rust library's, which must agree), the render's
// CPU time, and the encode's: the process's CPU time over REPS encodes one
// after the other, divided by REPS (the binding's own thread hop included).
"use strict";
const fs = require("fs");
const path = require("path");
const { createRequire } = require("module");

const [modules, tokenizerPath, repsArg] = process.argv.slice(2);
const reps = Number(repsArg);
const req = createRequire(path.join(path.resolve(modules), "x.js"));
const { Tokenizer } = req("@anush008/tokenizers");
const tok = Tokenizer.fromFile(tokenizerPath);
const turns = fs.readFileSync(0, "utf8").split("\n").filter((l) => l !== "").map((l) => JSON.parse(l));

(async () => {
	let bad = 0;
	for (const t of turns) {
		const enc = await tok.encode(t.text, null, { addSpecialTokens: false });
		const n = enc.getIds().length;
		if (n !== t.tokens) bad++;
		await tok.encode(t.text, null, { addSpecialTokens: false }); // warm
		const c0 = process.cpuUsage();
		for (let i = 0; i < reps; i++) await tok.encode(t.text, null, { addSpecialTokens: false });
		const c = process.cpuUsage(c0);
		const encUs = (c.user + c.system) / reps;
		const k = t.ctx >> 10;
		console.log(`engine-tokenize: ctx ${k}K: ${n} tokens (hftok ${t.tokens}), ${t.text.length} chars: ` +
			`render ${(t.render_us / 1000).toFixed(2)} ms + encode ${(encUs / 1000).toFixed(2)} ms = ` +
			`${((t.render_us + encUs) / 1000).toFixed(2)} ms of CPU per request`);
	}
	if (bad) {
		console.error(`engine-tokenize: ${bad} token counts differ between hftok and the Rust tokenizer`);
		process.exit(1);
	}
})().catch((e) => {
	console.error(e);
	process.exit(1);
});
