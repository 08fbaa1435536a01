// txmq console: confirmation before operator actions, and the live charts (no library, no CDN).
"use strict";

document.addEventListener("submit", (event) => {
  const question = event.target.dataset.confirm;
  if (question && !window.confirm(question)) event.preventDefault();
});

const SERIES = {
  throughput: [["putTps", "in", "#2b7bb9"], ["getTps", "out", "#e07b24"]],
  outcomes: [["commitsDelta", "commits", "#2e9e4f"], ["rollbacksDelta", "rollbacks", "#c0392b"]],
  latency: [["p50", "p50", "#6c5ce7"], ["p99", "p99", "#b33771"]],
};
const KEEP = 90;

function draw(canvas, samples, series) {
  const ctx = canvas.getContext("2d");
  const w = canvas.width, h = canvas.height, pad = 36;
  ctx.clearRect(0, 0, w, h);
  const max = Math.max(1, ...samples.flatMap((s) => series.map(([key]) => s[key])));
  ctx.strokeStyle = "#ccc";
  ctx.fillStyle = "#555";
  ctx.font = "12px sans-serif";
  for (let i = 0; i <= 4; i++) {
    const y = h - pad / 2 - (i / 4) * (h - pad);
    ctx.beginPath(); ctx.moveTo(pad, y); ctx.lineTo(w - 8, y); ctx.stroke();
    ctx.fillText((max * i / 4).toFixed(max < 10 ? 1 : 0), 2, y + 4);
  }
  for (const [key, , color] of series) {
    ctx.strokeStyle = color;
    ctx.lineWidth = 2;
    ctx.beginPath();
    samples.forEach((s, i) => {
      const x = pad + (i / Math.max(1, KEEP - 1)) * (w - pad - 8);
      const y = h - pad / 2 - (s[key] / max) * (h - pad);
      if (i === 0) ctx.moveTo(x, y); else ctx.lineTo(x, y);
    });
    ctx.stroke();
  }
}

function startCharts(root) {
  const samples = [];
  let last = null;
  async function tick() {
    try {
      const now = await (await fetch("/api/stats")).json();
      now.commitsDelta = last ? now.commits - last.commits : 0;
      now.rollbacksDelta = last ? now.rollbacks - last.rollbacks : 0;
      last = now;
      samples.push(now);
      if (samples.length > KEEP) samples.shift();
      for (const [name, series] of Object.entries(SERIES)) {
        draw(document.getElementById(`chart-${name}`), samples, series);
        document.getElementById(`legend-${name}`).textContent = series
          .map(([key, label]) => `${label} ${Number(now[key]).toFixed(1)}`).join(" · ");
      }
      root.dataset.samples = String(samples.length);
      root.dataset.commits = String(now.commits);
      root.dataset.rollbacks = String(now.rollbacks);
    } catch (err) {
      root.dataset.error = String(err);
    }
  }
  tick();
  setInterval(tick, Number(root.dataset.interval) || 2000);
}

document.addEventListener("DOMContentLoaded", () => {
  const root = document.getElementById("charts");
  if (root) startCharts(root);
});
