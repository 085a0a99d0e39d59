// The `tokenizers` side of utils/bench-tokenizer.sh through its Node binding
// (the npm package `tokenizers`: the same Rust library as the Python one),
// used where the Python package cannot be imported but this one can.
//
//   node bench_hf_tokenizers.js TOKENIZER_JSON IN.json REPEAT [AMK_BATCH_OUT.json]
//
// Prints what bench_hf_tokenizers.py prints: the best round's MB/s of CPU
// time (the binding encodes on a worker thread, so this is the process's CPU
// time; run with UV_THREADPOOL_SIZE=1 RAYON_NUM_THREADS=1), and with a batch
// answer, how many strings get other ids or decoded text from amk-tokenize.
const fs = require('fs');

async function main() {
  const [tokenizerPath, inputPath, repeat, comparePath] = process.argv.slice(2);
  const { Tokenizer } = require('tokenizers');
  const tok = Tokenizer.fromFile(tokenizerPath);
  const texts = JSON.parse(fs.readFileSync(inputPath, 'utf8'));
  const bytes = texts.reduce((n, t) => n + Buffer.byteLength(t), 0);
  let best = Infinity;
  for (let r = 0; r < Number(repeat); r++) {
    const start = process.cpuUsage();
    for (const t of texts) await tok.encode(t, null, { addSpecialTokens: false });
    const used = process.cpuUsage(start);
    best = Math.min(best, (used.user + used.system) / 1e6);
  }
  console.log(`tokenizers: ${bytes} bytes, best of ${repeat}: ${best.toFixed(4)} s ` +
              `of CPU, ${(bytes / 1e6 / best).toFixed(2)} MB/s`);
  if (comparePath) {
    const ours = JSON.parse(fs.readFileSync(comparePath, 'utf8'));
    let differ = 0;
    for (let i = 0; i < texts.length; i++) {
      const ids = (await tok.encode(texts[i], null, { addSpecialTokens: false })).getIds();
      const decoded = await tok.decode(ids, false);
      if (JSON.stringify(ids) !== JSON.stringify(ours[i].ids) || decoded !== ours[i].decoded)
        differ++;
    }
    console.log(`compare: ${texts.length} strings, ${differ} differ`);
  }
}

main().catch((e) => {
  console.error(`tokenizers (node): ${e.message}`);
  process.exit(2);
});
