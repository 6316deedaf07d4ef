// The live fabric WebSocket protocol, browser side. Mirrors fabricmon/live/messages.py
// (tests/live/test_wire.py checks the constants match).

export const NO_DATA = 255;
export const CODE_MAX = 254;
export const KIND_COLUMN = 1;
export const KIND_WINDOW = 2;
export const FLAG_LAST = 1; // the last WINDOW message of a window (windows come in ≤ 512 KiB parts)
export const COLUMN_HEADER_BYTES = 20;
export const WINDOW_HEADER_BYTES = 24;
export const CLOSE_UNAUTHENTICATED = 4401;
export const CLOSE_FORBIDDEN = 4403;
export const CLOSE_TOO_SLOW = 4408;
export const CLOSE_NO_SUCH_RUN = 4404;
export const CLOSE_SERVER_ERROR = 4500;

// Binary message → {kind, metricId, seq, nPorts, ts: Float64Array, codes: Uint8Array (column-major)}.
export function decodeBinary(buf) {
  const dv = new DataView(buf);
  const kind = dv.getUint8(0);
  const metricId = dv.getUint8(1);
  const flags = dv.getUint16(2, true);
  const seq = dv.getUint32(4, true);
  const nPorts = dv.getUint32(8, true);
  if (kind === KIND_COLUMN) {
    const ts = new Float64Array([dv.getFloat64(12, true)]);
    return { kind, metricId, flags, seq, nPorts, ts, codes: new Uint8Array(buf, COLUMN_HEADER_BYTES, nPorts) };
  }
  if (kind === KIND_WINDOW) {
    const nCols = dv.getUint32(12, true);
    const ts = new Float64Array(buf.slice(WINDOW_HEADER_BYTES, WINDOW_HEADER_BYTES + 8 * nCols));
    const codes = new Uint8Array(buf, WINDOW_HEADER_BYTES + 8 * nCols, nCols * nPorts);
    return { kind, metricId, flags, seq, nPorts, ts, codes, nCols };
  }
  throw new Error(`unknown live message kind ${kind}`);
}

// u8 code → value on the hello's scale (NaN = no data).
export function dequantise(code, scale) {
  if (code === NO_DATA) return NaN;
  const pos = code / CODE_MAX;
  if (scale.kind === "log") {
    const a = Math.log10(scale.lo), b = Math.log10(scale.hi);
    return code === 0 ? 0 : 10 ** (a + pos * (b - a));
  }
  return scale.lo + pos * (scale.hi - scale.lo);
}

const SI = [[1e12, "T"], [1e9, "G"], [1e6, "M"], [1e3, "k"]];

export function formatValue(value, scale) {
  if (Number.isNaN(value)) return "no data";
  if (scale.unit === "%") return `${(value * 100).toFixed(1)} %`;
  if (scale.kind === "log" && value === 0) return `< ${formatSi(scale.lo)}${scale.unit}`;
  return `${formatSi(value)}${scale.unit}`;
}

function formatSi(v) {
  for (const [f, p] of SI) if (Math.abs(v) >= f) return `${(v / f).toPrecision(3)} ${p}`;
  return `${v.toPrecision(3)} `;
}
