#!/usr/bin/env node
// A job for `svcq work` that reports progress: each `::progress N` line on stdout is posted as
// {"percent": N} (a JSON object is posted as it is) and keeps the item's lease alive.
// Every other line of stdout is the result; exiting non-zero reports an error instead.
let text = '';
for await (const chunk of process.stdin) text += chunk;
const { image, width } = JSON.parse(text);

for (let percent = 25; percent <= 100; percent += 25) {
  await new Promise((resolve) => setTimeout(resolve, 150)); // the pretend work
  console.log(`::progress ${percent}`);
}
console.error(`resized ${image} to ${width} px`);
console.log(JSON.stringify({ thumbnail: `${image.replace(/\.[^.]*$/, '')}-${width}.png`, width }));
