// This directory is a fork of github.com/ardanlabs/jinja v1.8.0 (Apache
// License 2.0, the LICENSE file kept here), the Jinja engine hftok renders
// chat templates with. agentkv changed it (each change marked [agentkv]):
//
//   - outputNode: {{ a + b ~ c ... }} is written operand by operand instead
//     of building the concatenated string (outputConcat; the output is the
//     same, TestOutputConcat checks it against the expression evaluated
//     whole). A chat template's '<|im_start|>' + role + '\n' + content +
//     '<|im_end|>' copied a long content three times.
//   - Template.RenderValuesSize makes room for the output up front.
//   - 'a' * n with n < 0 is '' as in Python (strings.Repeat panicked).
//   - Template.RenderMemo memoizes a loop's iterations across renders
//     (memo.go: an iteration whose item is the same Dict and whose reads
//     from outside give the same values again is written from the last
//     render's output, its sets replayed; a comparison of such a read is
//     recorded by its result, so loop.index0 > ns.last_user holds an
//     iteration after a new user turn moved ns.last_user; eval.go's
//     evalBinary calls recordCompare; TestLoopMemo checks it against
//     plain renders, and hftok's TestChatMatchesPythonJinja checks session
//     renders of Qwen3, Llama 3 and DeepSeek V3 templates against whole
//     ones). ast.go's forNode and template.go's Template carry its flag.
//   - Template.MutatesValues reports, from the same compile-time walk,
//     whether the template calls a method that changes a value in place
//     (hftok reuses a session's converted messages only when it does not).
//
// At a 128 K-token agent context the first two halved a session turn's
// tokenization (BenchmarkChatSessionTurn in hftok: 1,098 to 580 us), the
// loop memo halved it again (to about 300 us). The
// upstream tests (jinja_test.go, requests_test.go, testdata) run against
// the fork unchanged but for the import path.

package jinja
