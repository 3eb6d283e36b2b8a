// Exact arithmetic for the formulas costmodel exports (costmodel/formulas/javascript.py): the numbers Python's
// exact mode gives (costmodel/formulas/python.py: ints and fractions), with BigInt. A value is a BigInt when
// whole, else a reduced fraction {n, d} with d > 1. No double ever enters a count, so every integer is exact
// whatever its size; a time or a share becomes a double only at the end, rounded once (toFloat), as
// Python's float(Fraction) does.
"use strict";
const R = (() => {
  const isQ = (x) => typeof x !== "bigint";
  const num = (x) => (isQ(x) ? x.n : x);
  const den = (x) => (isQ(x) ? x.d : 1n);
  const abs = (a) => (a < 0n ? -a : a);

  function gcd(a, b) {
    a = abs(a); b = abs(b);
    while (b) [a, b] = [b, a % b];
    return a;
  }

  function make(n, d) {
    if (d === 0n) throw new RangeError("a division by zero at these values");
    if (d < 0n) { n = -n; d = -d; }
    const g = gcd(n, d);
    if (g > 1n) { n /= g; d /= g; }
    return d === 1n ? n : { n, d };
  }

  const q = (n, d) => make(BigInt(n), BigInt(d));

  function add2(a, b) {
    if (!isQ(a) && !isQ(b)) return a + b;
    return make(num(a) * den(b) + num(b) * den(a), den(a) * den(b));
  }

  function mul2(a, b) {
    if (!isQ(a) && !isQ(b)) return a * b;
    return make(num(a) * num(b), den(a) * den(b));
  }

  const add = (...xs) => xs.reduce(add2);
  const mul = (...xs) => xs.reduce(mul2);
  const div = (a, b) => make(num(a) * den(b), den(a) * num(b));

  function pow(a, k) { // k: a positive whole Number
    return isQ(a) ? make(a.n ** BigInt(k), a.d ** BigInt(k)) : a ** BigInt(k);
  }

  function cmp(a, b) { // -1, 0, 1
    const l = num(a) * den(b), r = num(b) * den(a);
    return l < r ? -1 : l > r ? 1 : 0;
  }

  const max = (...xs) => xs.reduce((a, b) => (cmp(b, a) > 0 ? b : a));
  const min = (...xs) => xs.reduce((a, b) => (cmp(b, a) < 0 ? b : a));

  function floor(a) {
    if (!isQ(a)) return a;
    const t = a.n / a.d; // BigInt division truncates toward zero
    return a.n < 0n && t * a.d !== a.n ? t - 1n : t;
  }

  const ceil = (a) => -floor(mul2(a, -1n));
  const mod = (a, b) => add2(a, mul2(-1n, mul2(b, floor(div(a, b)))));
  const where = (c, a, b) => (c ? a : b);
  const and = (...cs) => cs.every(Boolean);
  const eq = (a, b) => cmp(a, b) === 0, ne = (a, b) => cmp(a, b) !== 0;
  const lt = (a, b) => cmp(a, b) < 0, le = (a, b) => cmp(a, b) <= 0;
  const gt = (a, b) => cmp(a, b) > 0, ge = (a, b) => cmp(a, b) >= 0;

  const bits = (a) => a.toString(2).length;

  function toFloat(x) { // the double nearest to x (ties to even), as Python's float(Fraction)
    if (!isQ(x)) return Number(x);
    let n = x.n;
    const neg = n < 0n;
    if (neg) n = -n;
    // a quotient of at least 66 bits and a sticky bit below it: Number() then rounds once, correctly
    const shift = Math.max(0, 66 - (bits(n) - bits(x.d)));
    const scaled = n << BigInt(shift);
    let quo = scaled / x.d;
    quo = (quo << 1n) | (scaled % x.d ? 1n : 0n);
    let f = Number(quo);
    let k = shift + 1; // f × 2^-k, in steps that stay exact
    while (k > 0) { const s = Math.min(k, 1000); f /= 2 ** s; k -= s; }
    return neg ? -f : f;
  }

  const isWhole = (x) => !isQ(x);
  const text = (x) => (isQ(x) ? `${x.n}/${x.d}` : x.toString());

  return { q, add, mul, div, pow, max, min, floor, ceil, mod, where, and, eq, ne, lt, le, gt, ge, cmp,
           toFloat, isWhole, text };
})();
