// costmodel/units.py, function by function: the same digits for the same numbers. Rounding is half away
// from zero on the exact binary value of a double, which is what toFixed and toExponential do (and what
// units.py does with decimal.Decimal). The browser tests compare the two on the same numbers.
"use strict";
const Units = (() => {
  const MINUTE = 60, HOUR = 3600, DAY = 86400, YEAR = 31557600;

  function group(text) { // "-1234567" -> "-1,234,567"
    const neg = text.startsWith("-");
    const t = neg ? text.slice(1) : text;
    let out = "";
    for (let i = 0; i < t.length; i++) {
      if (i && (t.length - i) % 3 === 0) out += ",";
      out += t[i];
    }
    return (neg ? "-" : "") + out;
  }

  function grouped(n) { return group(BigInt(n).toString()); }

  function fixed(x, digits, grp) {
    let t = Number(x).toFixed(digits);
    if (/^-0(\.0*)?$/.test(t)) t = t.slice(1); // no "-0.00"
    if (!grp) return t;
    const [i, f] = t.split(".");
    return group(i) + (f === undefined ? "" : "." + f);
  }

  function expo(x, digits) { // [mantissa text, decimal exponent] of |x| rounded to `digits` significant digits
    const [m, e] = Math.abs(x).toExponential(digits - 1).split("e");
    return [m, Number(e)];
  }

  const strip = (t) => (t.includes(".") ? t.replace(/0+$/, "").replace(/\.$/, "") : t);
  const exp2 = (e) => (e >= 0 ? "+" : "-") + String(Math.abs(e)).padStart(2, "0");

  function exponential(x, digits) {
    x = Number(x);
    if (x === 0) return digits > 1 ? "0." + "0".repeat(digits - 1) + "e+00" : "0e+00";
    const [m, e] = expo(x, digits);
    return (x < 0 ? "-" : "") + m + "e" + exp2(e);
  }

  function sig(x, digits = 3) {
    x = Number(x);
    if (x === 0) return "0";
    const [m, e] = expo(x, digits);
    if (e >= -4 && e < digits) return strip(fixed(x, digits - 1 - e));
    return (x < 0 ? "-" : "") + strip(m) + "e" + exp2(e);
  }

  function sci(x) {
    const v = Number(x);
    if (Number.isInteger(v) && Math.abs(v) < 1e6) return grouped(v);
    return Math.abs(v) < 1e5 ? sig(v, 3) : exponential(v, 4);
  }

  const amount = (x) => (Math.abs(x) >= 1000 && Math.abs(x) < 1e15 ? fixed(x, 0, true) : sig(x, 3));

  function duration(seconds) {
    const s = Number(seconds);
    if (s < 1e-3) return amount(s * 1e6) + " µs";
    if (s < 1) return amount(s * 1e3) + " ms";
    if (s < 2 * MINUTE) return amount(s) + " s";
    if (s < 2 * HOUR) return amount(s / MINUTE) + " min";
    if (s < 2 * DAY) return amount(s / HOUR) + " h";
    if (s < 2 * YEAR) return amount(s / DAY) + " days";
    return amount(s / YEAR) + " years";
  }

  const gb = (n) => fixed(Number(n) / 1e9, 2, true) + " GB";
  const nbytes = (n) => gb(n) + " (" + fixed(Number(n) / 1073741824, 2, true) + " GiB)";
  const percent = (share, digits = 1) => fixed(100 * Number(share), digits) + "%";
  const rate = (x) => (Math.abs(x) < 1e15 ? fixed(x, 0, true) : sig(x, 3));
  const plural = (n, word, many) => grouped(n) + " " + (Number(n) === 1 ? word : (many || word + "s"));
  const devices = (n) => plural(n, "device");

  return { grouped, fixed, exponential, sig, sci, amount, duration, gb, nbytes, percent, rate, plural, devices };
})();
