// Encodes texts with Hugging Face tokenizers, as the reference for
// hftok's TestReference (run by .ci/tokenizer-ref.sh).
//
//   node encode.js NODE_MODULES TOKENIZER_JSON < texts.jsonl > golden.jsonl
//
// Each input line is a JSON string; each output line the JSON array of its
// ids as tokenizer.encode(text, add_special_tokens=False) gives them. The
// first output line names the implementation: the Rust tokenizers through
// its Node binding @anush008/tokenizers when it loads the file, else the
// pure JavaScript @huggingface/tokenizers (or always with
// AGENTKV_TOKREF_IMPL=js).
"use strict";
const fs = require("fs");
const path = require("path");
const { createRequire } = require("module");

const [modules, tokenizerPath] = process.argv.slice(2);
if (!modules || !tokenizerPath) {
	console.error("usage: node encode.js NODE_MODULES TOKENIZER_JSON < texts.jsonl > golden.jsonl");
	process.exit(2);
}
const req = createRequire(path.join(path.resolve(modules), "x.js"));
const version = (pkg) => JSON.parse(fs.readFileSync(path.join(path.resolve(modules), pkg, "package.json"), "utf8")).version;
const texts = fs.readFileSync(0, "utf8").split("\n").filter((l) => l !== "").map((l) => JSON.parse(l));

async function rust() {
	const { Tokenizer } = req("@anush008/tokenizers");
	const tok = Tokenizer.fromFile(tokenizerPath);
	const ids = [];
	const batch = 64;
	for (let i = 0; i < texts.length; i += batch) {
		const encs = await tok.encodeBatch(texts.slice(i, i + batch), { addSpecialTokens: false });
		for (const e of encs) ids.push(Array.from(e.getIds()));
	}
	return { impl: `@anush008/tokenizers@${version("@anush008/tokenizers")} (Rust tokenizers)`, ids };
}

async function js() {
	const { Tokenizer } = req("@huggingface/tokenizers");
	const tok = new Tokenizer(JSON.parse(fs.readFileSync(tokenizerPath, "utf8")), {});
	const ids = texts.map((t) => Array.from(tok.encode(t, { add_special_tokens: false }).ids));
	return { impl: `@huggingface/tokenizers@${version("@huggingface/tokenizers")} (JavaScript)`, ids };
}

(async () => {
	let out;
	try {
		if (process.env.AGENTKV_TOKREF_IMPL === "js") throw new Error("AGENTKV_TOKREF_IMPL=js");
		out = await rust();
	} catch (e) {
		console.error(`encode.js: the Rust binding failed (${String(e.message || e).split("\n")[0]}); using the JavaScript implementation`);
		out = await js();
	}
	console.error(`encode.js: ${path.basename(tokenizerPath)}: ${texts.length} texts with ${out.impl}`);
	const lines = [JSON.stringify({ implementation: out.impl, texts: texts.length })];
	for (const ids of out.ids) lines.push(JSON.stringify(ids));
	fs.writeFileSync(1, lines.join("\n") + "\n");
})().catch((e) => {
	console.error("encode.js:", e);
	process.exit(1);
});
