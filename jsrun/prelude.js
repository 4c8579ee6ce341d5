// The jsrun prelude. Compiled once per process to bytecode and evaluated in
// every fresh context before the guest source. It evaluates to a function that
// takes the discovery flag (see "freeze" below) and returns the private bridge object
// the Go loop drives: {start, poll, settle, finish}. Nothing it returns is
// reachable from the guest: the Go side holds it as a Value.
//
// Functions that can appear on a guest-visible stack are named jsrun$... so
// the Go side can cut them out of stack traces.
(function jsrun$prelude(discover) {
  'use strict';
  const G = globalThis;

  // ---- captured intrinsics (the guest cannot change them: all frozen below)
  const O = Object;
  const R = Reflect;
  const { defineProperty, getOwnPropertyDescriptor, getPrototypeOf, freeze, keys: objectKeys, create,
    getOwnPropertySymbols, isFrozen } = O;
  const apply = R.apply, ownKeys = R.ownKeys, construct = R.construct;
  const uncurry = (f) => (self, ...args) => apply(f, self, args);
  const getter = (proto, name) => uncurry(getOwnPropertyDescriptor(proto, name).get);
  const ArrayIsArray = Array.isArray;
  const ObjectProto = O.prototype, ArrayProto = Array.prototype;
  const hasOwn = O.hasOwn;
  const propertyIsEnumerable = uncurry(O.prototype.propertyIsEnumerable);
  const JSONstringify = JSON.stringify, JSONparse = JSON.parse;
  const $Map = Map, $Set = Set, $WeakSet = WeakSet, $Date = Date, $RegExp = RegExp, $Error = Error,
    $String = String, $BigInt = BigInt, $Promise = Promise, $Uint8Array = Uint8Array,
    $ArrayBuffer = ArrayBuffer, $DataView = DataView, $Array = Array, $TypeError = TypeError;
  const mapGet = uncurry($Map.prototype.get), mapSet = uncurry($Map.prototype.set),
    mapDelete = uncurry($Map.prototype.delete), mapForEach = uncurry($Map.prototype.forEach),
    mapSize = getter($Map.prototype, 'size');
  const setAdd = uncurry($Set.prototype.add), setHas = uncurry($Set.prototype.has),
    setForEach = uncurry($Set.prototype.forEach), setSize = getter($Set.prototype, 'size');
  const weakAdd = uncurry($WeakSet.prototype.add), weakHas = uncurry($WeakSet.prototype.has);
  const arrayPush = uncurry(ArrayProto.push), arrayJoin = uncurry(ArrayProto.join);
  const dateGetTime = uncurry($Date.prototype.getTime), dateToString = uncurry($Date.prototype.toString),
    dateToISOString = uncurry($Date.prototype.toISOString);
  const reSource = getter($RegExp.prototype, 'source'), reFlags = getter($RegExp.prototype, 'flags');
  const abByteLength = getter($ArrayBuffer.prototype, 'byteLength');
  const TypedArrayProto = getPrototypeOf($Uint8Array.prototype);
  const taTag = uncurry(getOwnPropertyDescriptor(TypedArrayProto, Symbol.toStringTag).get);
  const taBuffer = getter(TypedArrayProto, 'buffer'), taByteOffset = getter(TypedArrayProto, 'byteOffset'),
    taByteLength = getter(TypedArrayProto, 'byteLength');
  const dvBuffer = getter($DataView.prototype, 'buffer'), dvByteOffset = getter($DataView.prototype, 'byteOffset'),
    dvByteLength = getter($DataView.prototype, 'byteLength');
  const isError = $Error.isError;
  const strIsWellFormed = uncurry($String.prototype.isWellFormed);
  const charCodeAt = uncurry($String.prototype.charCodeAt), fromCharCode = $String.fromCharCode;
  const strSlice = uncurry($String.prototype.slice), strSplit = uncurry($String.prototype.split),
    strIndexOf = uncurry($String.prototype.indexOf), strStartsWith = uncurry($String.prototype.startsWith);
  const promiseThen = uncurry($Promise.prototype.then);
  const numberToString = uncurry(Number.prototype.toString);
  const typedCtors = {
    Int8Array, Uint8Array, Uint8ClampedArray, Int16Array, Uint16Array, Int32Array, Uint32Array,
    Float16Array: G.Float16Array, Float32Array, Float64Array, BigInt64Array, BigUint64Array,
  };
  const errorCtors = { Error, TypeError, RangeError, SyntaxError, ReferenceError, EvalError, URIError,
    AggregateError, InternalError: G.InternalError };

  // Errors the runtime itself creates keep their code when uncaught; a
  // guest-made error with a runtime-reserved code (RUN_*) loses it.
  const runtimeErrors = new $WeakSet();
  function jsrun$runtimeError(name, message, code, stack) {
    const Ctor = (name === 'TypeError') ? $TypeError : $Error;
    const e = new Ctor(message);
    if (name !== 'Error' && name !== 'TypeError') defineProperty(e, 'name', { value: name, configurable: false, writable: false });
    defineProperty(e, 'code', { value: code, enumerable: true, configurable: false, writable: false });
    if (stack !== undefined) defineProperty(e, 'stack', { value: stack, configurable: false, writable: false });
    weakAdd(runtimeErrors, e);
    return freeze(e);
  }

  // ---- base64 (no atob in the realm)
  const B64 = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/';
  function b64encode(bytes) {
    const out = [];
    const n = bytes.length;
    let i = 0;
    for (; i + 2 < n; i += 3) {
      const x = (bytes[i] << 16) | (bytes[i + 1] << 8) | bytes[i + 2];
      arrayPush(out, B64[x >> 18] + B64[(x >> 12) & 63] + B64[(x >> 6) & 63] + B64[x & 63]);
    }
    if (i < n) {
      const x = (bytes[i] << 16) | ((i + 1 < n ? bytes[i + 1] : 0) << 8);
      arrayPush(out, B64[x >> 18] + B64[(x >> 12) & 63] + (i + 1 < n ? B64[(x >> 6) & 63] : '=') + '=');
    }
    return arrayJoin(out, '');
  }
  const B64INV = create(null);
  for (let i = 0; i < 64; i++) B64INV[B64[i]] = i;
  function b64decode(s) {
    let pad = 0;
    while (pad < 2 && s.length > pad && s[s.length - 1 - pad] === '=') pad++;
    const n = (s.length / 4) * 3 - pad;
    const out = new $Uint8Array(n < 0 ? 0 : n);
    let o = 0;
    for (let i = 0; i + 3 < s.length; i += 4) {
      const x = ((B64INV[s[i]] | 0) << 18) | ((B64INV[s[i + 1]] | 0) << 12) |
        ((B64INV[s[i + 2]] | 0) << 6) | (B64INV[s[i + 3]] | 0);
      if (o < n) out[o++] = x >> 16;
      if (o < n) out[o++] = (x >> 8) & 255;
      if (o < n) out[o++] = x & 255;
    }
    return out;
  }

  // ---- serializer: the jsrun-v1 wire format (see serde.go for the grammar)
  function jsrun$serializationError(message) {
    return jsrun$runtimeError('TypeError', message, 'RUN_SERIALIZATION_ERROR');
  }
  const identRe = /^[A-Za-z_$][A-Za-z0-9_$]*$/;
  const reTest = uncurry($RegExp.prototype.test);
  function childPath(path, key) {
    return reTest(identRe, key) ? path + '.' + key : path + '[' + JSONstringify(key) + ']';
  }
  function describe(v) {
    let name = '';
    try {
      const p = getPrototypeOf(v);
      const c = p && hasOwn(p, 'constructor') ? getOwnPropertyDescriptor(p, 'constructor').value : undefined;
      if (typeof c === 'function') name = $String(getOwnPropertyDescriptor(c, 'name')?.value ?? '');
    } catch (_) { /* a Proxy may throw */ }
    if (name === 'Promise') return 'a Promise';
    if (name === 'WeakMap' || name === 'WeakSet' || name === 'WeakRef') return 'a ' + name;
    return name ? 'an instance of class ' + name : 'an object with a custom prototype';
  }
  function units(s) {
    const u = [];
    for (let i = 0; i < s.length; i++) arrayPush(u, charCodeAt(s, i));
    return u;
  }
  function bytesOf(buffer, offset, length) {
    return new $Uint8Array(buffer, offset, length);
  }
  // Fast paths for the common JSON-safe cases. They return exactly what the
  // full serializer returns for the same value, or undefined to fall back.
  const jsonSafe = (v) => {
    switch (typeof v) {
      case 'string': return strIsWellFormed(v);
      case 'number': return v === v && v !== Infinity && v !== -Infinity && !(v === 0 && 1 / v < 0);
      case 'boolean': return true;
      case 'object': return v === null;
    }
    return false;
  };
  // serializeArgs serializes a host call's arguments: a rest-parameter
  // array the runtime created (dense, plain, no accessors), so reading an
  // element twice (fast path, then the fallback) has no effect.
  function serializeArgs(args) {
    const len = args.length;
    const root = ['a'];
    const nodes = [root];
    for (let i = 0; i < len; i++) {
      const v = args[i];
      if (!jsonSafe(v)) return serialize(args, 'arguments');
      arrayPush(root, i + 1);
      arrayPush(nodes, v);
    }
    return JSONstringify(nodes);
  }
  function serialize(value, rootPath) {
    if (jsonSafe(value)) return JSONstringify([value]);
    const nodes = [];
    const seen = new $Map();
    const add = (n) => { arrayPush(nodes, n); return nodes.length - 1; };
    function ser(v, path) {
      switch (typeof v) {
        case 'string': return add(strIsWellFormed(v) ? v : ['s', units(v)]);
        case 'number':
          if (v !== v) return add(['n', 'NaN']);
          if (v === Infinity) return add(['n', 'Infinity']);
          if (v === -Infinity) return add(['n', '-Infinity']);
          if (v === 0 && 1 / v < 0) return add(['n', '-0']);
          return add(v);
        case 'boolean': return add(v);
        case 'undefined': return add(['u']);
        case 'bigint': return add(['b', $String(v)]);
        case 'symbol': throw jsrun$serializationError('Cannot serialize a symbol at ' + path);
        case 'function': throw jsrun$serializationError('Cannot serialize a function at ' + path);
      }
      if (v === null) return add(null);
      const prior = mapGet(seen, v);
      if (prior !== undefined) return prior;
      const idx = add(0);
      mapSet(seen, v, idx);
      nodes[idx] = serObject(v, path);
      return idx;
    }
    function serObject(v, path) {
      if (ArrayIsArray(v)) {
        if (getPrototypeOf(v) !== ArrayProto) throw jsrun$serializationError('Cannot serialize ' + describe(v) + ' at ' + path);
        const len = v.length;
        const ks = objectKeys(v);
        let indices = 0;
        for (let i = 0; i < ks.length; i++) { const k = ks[i]; if ($String(k >>> 0) === k && (k >>> 0) < len) indices++; }
        if (indices === len) {
          const n = ['a'];
          for (let i = 0; i < len; i++) arrayPush(n, ser(v[i], path + '[' + i + ']'));
          return n;
        }
        const n = ['A', len];
        for (let i = 0; i < ks.length; i++) {
          const k = ks[i];
          if ($String(k >>> 0) === k && (k >>> 0) < len) { arrayPush(n, k >>> 0); arrayPush(n, ser(v[k], path + '[' + k + ']')); }
        }
        return n;
      }
      try { const t = dateGetTime(v); return ['D', t !== t ? null : t]; } catch (_) { /* not a Date */ }
      try { const src = reSource(v); return ['R', src, reFlags(v)]; } catch (_) { /* not a RegExp */ }
      try {
        mapSize(v);
        const n = ['M'];
        let i = 0;
        mapForEach(v, (val, key) => {
          arrayPush(n, ser(key, path + '.<key ' + i + '>'));
          arrayPush(n, ser(val, path + '.<value ' + i + '>'));
          i++;
        });
        return n;
      } catch (e) { if (weakHas(runtimeErrors, e)) throw e; }
      try {
        setSize(v);
        const n = ['S'];
        let i = 0;
        setForEach(v, (val) => { arrayPush(n, ser(val, path + '.<value ' + i + '>')); i++; });
        return n;
      } catch (e) { if (weakHas(runtimeErrors, e)) throw e; }
      try { const n = abByteLength(v); return ['B', b64encode(bytesOf(v, 0, n))]; } catch (_) { /* not an ArrayBuffer */ }
      // Views name their ArrayBuffer node, so views over one buffer stay
      // views over one buffer, with their offsets and lengths.
      const tag = taTag(v);
      if (tag !== undefined) return ['V', tag, ser(taBuffer(v), path + '.buffer'), taByteOffset(v), taByteLength(v)];
      let dvBuf;
      try { dvBuf = dvBuffer(v); } catch (_) { /* not a DataView */ }
      if (dvBuf !== undefined) return ['V', 'DataView', ser(dvBuf, path + '.buffer'), dvByteOffset(v), dvByteLength(v)];
      if (isError(v)) {
        let name = v.name, message = v.message;
        name = typeof name === 'string' ? name : 'Error';
        message = typeof message === 'string' ? message : '';
        const n = ['E', name, message, -1, -1];
        if (hasOwn(v, 'cause')) n[3] = ser(v.cause, path + '.cause');
        if (hasOwn(v, 'errors') && ArrayIsArray(v.errors)) n[4] = ser(v.errors, path + '.errors');
        return n;
      }
      const proto = getPrototypeOf(v);
      if (proto !== ObjectProto && proto !== null) throw jsrun$serializationError('Cannot serialize ' + describe(v) + ' at ' + path);
      const syms = getOwnPropertySymbols(v);
      for (let i = 0; i < syms.length; i++) {
        if (propertyIsEnumerable(v, syms[i])) throw jsrun$serializationError('Cannot serialize a symbol-keyed property at ' + path);
      }
      const n = [proto === null ? 'O' : 'o'];
      const ks = objectKeys(v);
      for (let i = 0; i < ks.length; i++) {
        const k = ks[i];
        arrayPush(n, k);
        arrayPush(n, ser(v[k], childPath(path, k)));
      }
      return n;
    }
    ser(value, rootPath);
    return JSONstringify(nodes);
  }

  function fromUnits(u) {
    let s = '';
    for (let i = 0; i < u.length; i += 4096) s += apply(fromCharCode, undefined, u.slice(i, i + 4096));
    return s;
  }
  function deserialize(wire) {
    const nodes = JSONparse(wire);
    const first = nodes[0];
    if (nodes.length === 1 && (first === null || typeof first !== 'object')) return first;
    const memo = new $Array(nodes.length);
    const done = new $Array(nodes.length);
    function de(i) {
      if (done[i]) return memo[i];
      const n = nodes[i];
      if (n === null || typeof n !== 'object') { done[i] = true; memo[i] = n; return n; }
      let out;
      switch (n[0]) {
        case 'u': out = undefined; break;
        case 'n': out = n[1] === 'NaN' ? NaN : n[1] === 'Infinity' ? Infinity : n[1] === '-Infinity' ? -Infinity : -0; break;
        case 'b': out = $BigInt(n[1]); break;
        case 's': out = fromUnits(n[1]); break;
        case 'D': out = new $Date(n[1] === null ? NaN : n[1]); break;
        case 'R': out = new $RegExp(n[1], n[2]); break;
        case 'B': { const b = b64decode(n[1]); out = taBuffer(b); break; }
        case 'T': {
          const b = b64decode(n[2]);
          if (n[1] === 'DataView') out = new $DataView(taBuffer(b));
          else { const C = typedCtors[n[1]]; out = new C(taBuffer(b)); }
          break;
        }
        case 'V': {
          const buf = de(n[2]);
          if (n[1] === 'DataView') out = new $DataView(buf, n[3], n[4]);
          else { const C = typedCtors[n[1]]; out = new C(buf, n[3], n[4] / C.BYTES_PER_ELEMENT); }
          break;
        }
        default: break;
      }
      if (out !== undefined || n[0] === 'u' || n[0] === 'n') { done[i] = true; memo[i] = out; return out; }
      switch (n[0]) {
        case 'a': {
          out = new $Array(n.length - 1);
          done[i] = true; memo[i] = out;
          for (let j = 1; j < n.length; j++) out[j - 1] = de(n[j]);
          return out;
        }
        case 'A': {
          out = new $Array(n[1]);
          done[i] = true; memo[i] = out;
          for (let j = 2; j + 1 < n.length; j += 2) out[n[j]] = de(n[j + 1]);
          return out;
        }
        case 'o': case 'O': {
          out = n[0] === 'O' ? create(null) : {};
          done[i] = true; memo[i] = out;
          for (let j = 1; j + 1 < n.length; j += 2) {
            defineProperty(out, n[j], { value: de(n[j + 1]), writable: true, enumerable: true, configurable: true });
          }
          return out;
        }
        case 'M': {
          out = new $Map();
          done[i] = true; memo[i] = out;
          for (let j = 1; j + 1 < n.length; j += 2) mapSet(out, de(n[j]), de(n[j + 1]));
          return out;
        }
        case 'S': {
          out = new $Set();
          done[i] = true; memo[i] = out;
          for (let j = 1; j < n.length; j++) setAdd(out, de(n[j]));
          return out;
        }
        case 'E': {
          const C = hasOwn(errorCtors, n[1]) && errorCtors[n[1]] ? errorCtors[n[1]] : $Error;
          out = C === AggregateError ? new C([], n[2]) : new C(n[2]);
          if (out.name !== n[1]) defineProperty(out, 'name', { value: n[1], writable: true, configurable: true });
          defineProperty(out, 'stack', { value: '', writable: true, configurable: true });
          done[i] = true; memo[i] = out;
          if (n[3] >= 0) defineProperty(out, 'cause', { value: de(n[3]), writable: true, configurable: true });
          if (n[4] >= 0) defineProperty(out, 'errors', { value: de(n[4]), writable: true, configurable: true });
          return out;
        }
      }
      throw new $TypeError('jsrun: bad wire node');
    }
    return de(0);
  }

  // ---- determinism: Date and Math.random
  let clock = 0; // set by init
  const tick = () => { const t = clock; clock += 1; return t; };
  const RealDate = $Date;
  const DateShim = function Date(...args) {
    if (new.target === undefined) return dateToString(new RealDate(tick()));
    if (args.length === 0) return construct(RealDate, [tick()], new.target);
    return construct(RealDate, args, new.target);
  };
  defineProperty(DateShim, 'length', { value: 7 });
  defineProperty(DateShim, 'prototype', { value: RealDate.prototype, writable: false, enumerable: false, configurable: false });
  DateShim.now = function now() { return tick(); };
  DateShim.parse = RealDate.parse;
  DateShim.UTC = RealDate.UTC;
  defineProperty(RealDate.prototype, 'constructor', { value: DateShim, writable: true, configurable: true, enumerable: false });
  G.Date = DateShim;

  // xorshift128+ over two 64-bit BigInt halves, seeded from the token state.
  const M64 = (1n << 64n) - 1n;
  let s0 = 0n, s1 = 1n; // set by init
  const NumberOf = Number;
  Math.random = function random() {
    let x = s0;
    const y = s1;
    s0 = y;
    x = (x ^ (x << 23n)) & M64;
    s1 = x ^ y ^ (x >> 17n) ^ (y >> 26n);
    // (x & M64), not BigInt.asUintN(64, x): this QuickJS build returns a
    // negative value from asUintN for some inputs.
    return NumberOf(((s1 + y) & M64) >> 11n) / 9007199254740992;
  };

  // ---- console: deterministic formatting, captured and capped
  let consoleOut = '';
  let consoleBytes = 0;
  let consoleTruncated = false;
  let consoleMax = 0; // set by init
  // quote renders a string inside a value as Node's util.inspect does (the
  // Run SDK's console): single quotes unless the string holds one, then
  // double quotes, then backticks.
  function quote(v) {
    const q = strIndexOf(v, "'") < 0 ? "'" : strIndexOf(v, '"') < 0 ? '"' : strIndexOf(v, '`') < 0 ? '`' : "'";
    let out = q;
    for (let i = 0; i < v.length; i++) {
      const ch = v[i];
      const c = charCodeAt(v, i);
      if (ch === q || ch === '\\') out += '\\' + ch;
      else if (ch === '\n') out += '\\n';
      else if (ch === '\t') out += '\\t';
      else if (ch === '\r') out += '\\r';
      else if (c < 0x20 || c === 0x7f) out += '\\x' + (c < 16 ? '0' : '') + numberToString(c, 16);
      else out += ch;
    }
    return out + q;
  }
  function fmt(v, depth, seenSet) {
    switch (typeof v) {
      case 'string': return depth === 0 ? v : quote(v);
      case 'number': return (v === 0 && 1 / v < 0) ? '-0' : $String(v);
      case 'bigint': return $String(v) + 'n';
      case 'undefined': case 'boolean': return $String(v);
      case 'symbol': try { return $String(v); } catch (_) { return 'Symbol()'; }
      case 'function': return '[Function: ' + ($String(v.name) || 'anonymous') + ']';
    }
    if (v === null) return 'null';
    if (setHas(seenSet, v)) return '[Circular]';
    if (depth > 3) return ArrayIsArray(v) ? '[Array]' : '[Object]';
    setAdd(seenSet, v);
    try {
      if (isError(v)) return $String(v.name) + ': ' + $String(v.message);
      try { return dateToISOString(v); } catch (_) { /* not a date, or invalid */ }
      if (ArrayIsArray(v)) {
        const parts = [];
        for (let i = 0; i < v.length && i < 100; i++) arrayPush(parts, fmt(v[i], depth + 1, seenSet));
        if (v.length > 100) arrayPush(parts, '... ' + (v.length - 100) + ' more items');
        return '[ ' + arrayJoin(parts, ', ') + ' ]';
      }
      try {
        mapSize(v);
        const parts = [];
        mapForEach(v, (val, key) => arrayPush(parts, fmt(key, depth + 1, seenSet) + ' => ' + fmt(val, depth + 1, seenSet)));
        return 'Map(' + parts.length + ') { ' + arrayJoin(parts, ', ') + ' }';
      } catch (_) { /* not a Map */ }
      try {
        setSize(v);
        const parts = [];
        setForEach(v, (val) => arrayPush(parts, fmt(val, depth + 1, seenSet)));
        return 'Set(' + parts.length + ') { ' + arrayJoin(parts, ', ') + ' }';
      } catch (_) { /* not a Set */ }
      const ks = objectKeys(v);
      const parts = [];
      for (let i = 0; i < ks.length && i < 100; i++) arrayPush(parts, ks[i] + ': ' + fmt(v[ks[i]], depth + 1, seenSet));
      return '{ ' + arrayJoin(parts, ', ') + ' }';
    } catch (_) {
      return '[object]';
    }
  }
  function utf8Length(s) {
    let n = 0;
    for (let i = 0; i < s.length; i++) {
      const c = charCodeAt(s, i);
      if (c >= 0xD800 && c <= 0xDBFF && i + 1 < s.length) {
        const d = charCodeAt(s, i + 1);
        if (d >= 0xDC00 && d <= 0xDFFF) { n += 4; i++; continue; }
      }
      n += c < 0x80 ? 1 : c < 0x800 ? 2 : 3;
    }
    return n;
  }
  function emit(stream, args) {
    if (consoleTruncated) return;
    const parts = [];
    for (let i = 0; i < args.length; i++) arrayPush(parts, fmt(args[i], 0, new $Set()));
    const line = (stream === 'err' ? '[stderr] ' : '') + arrayJoin(parts, ' ') + '\n';
    const n = utf8Length(line);
    if (consoleBytes + n > consoleMax) {
      consoleTruncated = true;
      return;
    }
    consoleBytes += n;
    consoleOut += line;
  }
  const consoleObj = create(ObjectProto);
  for (const [name, stream] of [['log', 'out'], ['info', 'out'], ['debug', 'out'], ['warn', 'err'], ['error', 'err'], ['trace', 'err']]) {
    defineProperty(consoleObj, name, {
      value: { [name](...args) { emit(stream, args); } }[name], enumerable: true, writable: false, configurable: false,
    });
  }
  G.console = consoleObj;

  // ---- no dynamic code: every Function constructor throws, eval is gone
  function jsrun$noDynamicCode() {
    throw jsrun$runtimeError('EvalError', 'Dynamic code evaluation is not allowed', 'RUN_USER_SOURCE_ERROR');
  }
  const fnCtors = [
    Function,
    getPrototypeOf(async function () {}).constructor,
    getPrototypeOf(function* () {}).constructor,
    getPrototypeOf(async function* () {}).constructor,
  ];
  for (const C of fnCtors) {
    const blocked = { [C.name](...args) { return jsrun$noDynamicCode(); } }[C.name];
    defineProperty(blocked, 'prototype', { value: C.prototype, writable: false, enumerable: false, configurable: false });
    defineProperty(C.prototype, 'constructor', { value: blocked, writable: false, enumerable: false, configurable: false });
    if (C === Function) G.Function = blocked;
  }
  for (const name of ['eval', 'Atomics', 'SharedArrayBuffer', 'WeakRef', 'FinalizationRegistry']) delete G[name];

  // ---- host functions: namespace objects of lazy thenables
  let outbox = [];
  let requestCount = 0;
  const pending = new $Map();
  let maxArgumentsBytes = 0; // set by init
  // Host calls the guest made but never awaited (their thenable was never
  // used): returning with one fails the run as detached, as in the Run SDK.
  let undispatched = 0;
  let firstUndispatched = '';
  function jsrun$dispatch(name, argsWire, serErr, site) {
    if (serErr !== undefined) return $Promise.reject(serErr);
    let resolve, reject;
    const p = new $Promise((res, rej) => { resolve = res; reject = rej; });
    const idx = ++requestCount;
    mapSet(pending, idx, { resolve, reject, site });
    arrayPush(outbox, [idx, name, argsWire]);
    return p;
  }
  // guestStack is the stack of an error created in a host function's
  // wrapper, without the wrapper's own frame (the first one): the guest's
  // frames only.
  function guestStack(site) {
    try {
      const stack = site.stack;
      return typeof stack === 'string' ? strSlice(stack, strIndexOf(stack, '\n') + 1) : '';
    } catch (_) { return ''; }
  }
  function makeHostFunction(qualified, fnName) {
    const f = {
      [fnName](...args) {
        const site = new $Error();
        let argsWire, serErr;
        try {
          argsWire = serializeArgs(args);
        } catch (e) {
          serErr = weakHas(runtimeErrors, e) ? e : jsrun$runtimeError('TypeError', 'Cannot serialize the arguments of ' + qualified, 'RUN_SERIALIZATION_ERROR');
        }
        if (serErr === undefined && argsWire.length > maxArgumentsBytes / 3 && utf8Length(argsWire) > maxArgumentsBytes) {
          // Over the limit: an error the guest can catch, not the end of the run.
          serErr = jsrun$runtimeError('Error', 'Host function arguments exceed the ' + maxArgumentsBytes + ' byte size limit.', 'RUN_BRIDGE_LIMIT', guestStack(site));
        }
        let promise;
        undispatched++;
        if (firstUndispatched === '') firstUndispatched = qualified;
        const then = function then(onFulfilled, onRejected) {
          if (promise === undefined) {
            undispatched--;
            if (undispatched === 0) firstUndispatched = '';
            promise = jsrun$dispatch(qualified, argsWire, serErr, site);
          }
          return promiseThen(promise, onFulfilled, onRejected);
        };
        return freeze({
          then,
          catch(onRejected) { return then(undefined, onRejected); },
          finally(onFinally) {
            return then((v) => { onFinally(); return v; }, (e) => { onFinally(); throw e; });
          },
        });
      },
    }[fnName];
    return freeze(f);
  }
  // A synchronous host function calls the Go side directly (hostSync, the
  // one Go function registered for such a run; init takes it off the global
  // object before the guest runs) and returns its answer: '1' + wire value,
  // '0' + error JSON, or '' when the run is over (the Go side has already
  // interrupted the VM). Host calls awaited before it are handed over first,
  // so that request indices stay in call order.
  let hostSync;
  function makeSyncHostFunction(qualified, fnName) {
    const f = {
      [fnName](...args) {
        let argsWire;
        try {
          argsWire = serializeArgs(args);
        } catch (e) {
          throw weakHas(runtimeErrors, e) ? e : jsrun$runtimeError('TypeError', 'Cannot serialize the arguments of ' + qualified, 'RUN_SERIALIZATION_ERROR');
        }
        ++requestCount;
        let calls = '';
        if (outbox.length !== 0) { calls = JSONstringify(outbox); outbox = []; }
        const r = hostSync(calls, qualified, argsWire);
        const kind = strSlice(r, 0, 1);
        if (kind === '1') return deserialize(strSlice(r, 1));
        const info = kind === '0' ? JSONparse(strSlice(r, 1)) : { name: 'Error', message: 'run stopped', code: 'RUN_INTERNAL_ERROR' };
        // The stack starts at the guest's call: this function's own frame
        // is the runtime's.
        let stack = '';
        try { stack = new $Error().stack; stack = strSlice(stack, strIndexOf(stack, '\n') + 1); } catch (_) { /* keep */ }
        throw jsrun$runtimeError(info.name, info.message, info.code, stack);
      },
    }[fnName];
    return freeze(f);
  }
  // The namespaces themselves are defined by init, after hardening, so that a
  // context can be hardened before its run is known.

  // ---- the override mistake: assigning e.g. this.name in an Error subclass
  // would fail once Error.prototype is frozen, so the commonly overridden
  // properties become accessors whose setter defines an own property.
  // One descriptor object for all of them (null prototype: nothing
  // inherited is read as a descriptor field), not one per property: this
  // runs for 48 properties in every fresh context.
  const OVR = create(null);
  OVR.configurable = false;
  function enableOverride(obj, prop) {
    const d = getOwnPropertyDescriptor(obj, prop);
    if (d === undefined || !('value' in d)) return;
    const value = d.value;
    OVR.get = { [prop]() { return value; } }[prop];
    OVR.set = {
      [prop](v) {
        if (this === obj) throw new $TypeError("Cannot assign to read only property '" + $String(prop) + "'");
        defineProperty(this, prop, { value: v, writable: true, enumerable: true, configurable: true });
      },
    }[prop];
    OVR.enumerable = d.enumerable;
    defineProperty(obj, prop, OVR);
  }
  for (const C of [Error, TypeError, RangeError, SyntaxError, ReferenceError, EvalError, URIError, AggregateError, G.InternalError]) {
    if (C === undefined) continue;
    for (const p of ['name', 'message', 'constructor', 'toString']) enableOverride(C.prototype, p);
  }
  for (const p of ['constructor', 'toString', 'valueOf', 'toLocaleString', 'hasOwnProperty', 'isPrototypeOf', 'propertyIsEnumerable']) enableOverride(ObjectProto, p);
  for (const p of ['constructor', 'toString', 'push', 'join']) enableOverride(ArrayProto, p);
  enableOverride(Function.prototype, 'toString');

  // ---- freeze every intrinsic reachable from the global object
  // Containers are frozen (constructors, prototypes, namespaces such as Math
  // and JSON, and the hidden intrinsic prototypes); plain methods (functions
  // without a prototype property) are leaves: their own properties (name,
  // length) are already read-only. Then every global binding is made
  // read-only and non-configurable. Walking every property descriptor costs
  // milliseconds in this engine, so the Go side runs the walk once per
  // process (discover === true) and generates straight-line code from what it
  // found (one property read and one freeze per container, one
  // defineProperty per global), which it splices into this source in place
  // of the marker below before compiling the bytecode every context uses.
  // Without the generated code (the marker left in place) a non-discovery
  // prelude throws rather than leave anything unfrozen.
  const hidden = [fnCtors[1], fnCtors[2], fnCtors[3], getPrototypeOf([][Symbol.iterator]()),
    getPrototypeOf(new $Map().entries()), getPrototypeOf(new $Set().values()), getPrototypeOf(''[Symbol.iterator]()),
    getPrototypeOf(/a/[Symbol.matchAll]('')), getPrototypeOf((function* () {})()),
    getPrototypeOf((async function* () {})()), getPrototypeOf([].values().map((x) => x)),
    getPrototypeOf(Iterator.from({ next() { return { done: true }; } })),
    getPrototypeOf(getPrototypeOf((async function* () {})()))];
  const wellKnown = ['iterator', 'asyncIterator', 'hasInstance', 'isConcatSpreadable', 'match', 'matchAll',
    'replace', 'search', 'species', 'split', 'toPrimitive', 'toStringTag', 'unscopables'];
  const FunctionProto = Function.prototype;
  const isContainer = (v) => (typeof v === 'object' && v !== null) ||
    (typeof v === 'function' && (v === FunctionProto || hasOwn(v, 'prototype')));
  const dataValue = (o, k) => { const d = getOwnPropertyDescriptor(o, k); return d === undefined ? undefined : d.value; };
  let discovered = null;
  if (discover === true) {
    const stepOf = (k) => {
      if (typeof k === 'string') return '.' + k;
      for (let i = 0; i < wellKnown.length; i++) if (Symbol[wellKnown[i]] === k) return '@' + wellKnown[i];
      return undefined;
    };
    const visited = new $Set();
    const queue = [];
    for (const k of ownKeys(G)) {
      const v = dataValue(G, k);
      const step = stepOf(k);
      if (v !== G && step !== undefined && isContainer(v)) arrayPush(queue, [v, [step]]);
    }
    for (let i = 0; i < hidden.length; i++) arrayPush(queue, [hidden[i], ['#' + i]]);
    const paths = [];
    for (let qi = 0; qi < queue.length; qi++) {
      const [o, path] = queue[qi];
      if (o === G || setHas(visited, o)) continue;
      setAdd(visited, o);
      freeze(o);
      arrayPush(paths, path);
      const p = getPrototypeOf(o);
      if (p !== null && isContainer(p)) arrayPush(queue, [p, [...path, '^']]);
      const ds = O.getOwnPropertyDescriptors(o);
      const ks = ownKeys(ds);
      for (let i = 0; i < ks.length; i++) {
        const v = ds[ks[i]].value;
        const step = stepOf(ks[i]);
        if (v !== undefined && step !== undefined && isContainer(v)) arrayPush(queue, [v, [...path, step]]);
      }
    }
    // Globals to make read-only: [step, isData]; a key that is neither a
    // string nor a well-known symbol has no step and fails the discovery.
    const globals = [];
    for (const k of ownKeys(G)) {
      const d = getOwnPropertyDescriptor(G, k);
      if (d.configurable || d.writable) {
        arrayPush(globals, [stepOf(k) ?? null, 'value' in d]);
        if ('value' in d) defineProperty(G, k, { value: d.value, writable: false, configurable: false, enumerable: d.enumerable });
        else defineProperty(G, k, { configurable: false });
      }
    }
    discovered = { paths, globals };
  } else {
    const RO = create(null);
    RO.writable = false;
    RO.configurable = false;
    const NC = create(null);
    NC.configurable = false;
    const known = function jsrun$freezeKnown(G, S, hidden, freeze, getPrototypeOf, defineProperty, RO, NC) {
      'use strict';
      /*@jsrun:freeze@*/
    };
    if (known(G, Symbol, hidden, freeze, getPrototypeOf, defineProperty, RO, NC) !== true) {
      throw new $Error('jsrun: prelude compiled without its freeze list');
    }
  }

  // ---- the bridge the Go loop drives
  let outcome = 0; // 0 running, 1 returned, 2 threw
  let outcomeValue;
  function errorInfo(e) {
    let name = 'Error', message = '', code = 'RUN_USER_SOURCE_ERROR', guestCode = '', stack = '';
    if (isError(e)) {
      try { name = $String(e.name); } catch (_) { /* keep */ }
      try { message = $String(e.message); } catch (_) { /* keep */ }
      try { const s = e.stack; if (typeof s === 'string') stack = s; } catch (_) { /* keep */ }
    } else {
      try { message = typeof e === 'string' ? e : fmt(e, 1, new $Set()); } catch (_) { message = 'non-error value thrown'; }
    }
    let c;
    try { c = (e !== null && (typeof e === 'object' || typeof e === 'function')) ? e.code : undefined; } catch (_) { c = undefined; }
    // A runtime-made error keeps its code; the guest's own code is reported
    // under its own name, never as the run's code.
    if (typeof c === 'string' && c !== '') {
      if (weakHas(runtimeErrors, e)) code = c;
      else guestCode = c;
    }
    // QuickJS throws null when it cannot even allocate its out-of-memory
    // error; the Go side reports an uncaught null as the memory limit.
    return { name, message, code, guestCode, stack, null: e === null };
  }
  return freeze({
    // init configures a hardened context for one run: the determinism state,
    // the console cap and the host namespaces. Called once, before start.
    init(runJSON) {
      const run = JSONparse(runJSON);
      clock = run.dateNowMs;
      s0 = $BigInt('0x' + strSlice(run.seed, 0, 16));
      s1 = $BigInt('0x' + strSlice(run.seed, 16, 32));
      if (s0 === 0n && s1 === 0n) s1 = 1n;
      consoleMax = run.consoleMax;
      maxArgumentsBytes = run.maxArgumentsBytes;
      if (run.sync === true) {
        hostSync = G.jsrun$sync;
        delete G.jsrun$sync;
      }
      for (const [ns, fns, synchronous] of run.namespaces) {
        const obj = create(null);
        for (let i = 0; i < fns.length; i++) {
          const fn = fns[i];
          const make = synchronous !== undefined && synchronous[i] === true ? makeSyncHostFunction : makeHostFunction;
          defineProperty(obj, fn, { value: make(ns + '.' + fn, fn), enumerable: true });
        }
        defineProperty(G, ns, { value: freeze(obj), enumerable: false, writable: false, configurable: false });
      }
    },
    start: function jsrun$start(fn) {
      let p;
      try { p = fn(); } catch (e) { outcome = 2; outcomeValue = e; return; }
      promiseThen(p, (v) => { outcome = 1; outcomeValue = v; }, (e) => { outcome = 2; outcomeValue = e; });
    },
    // poll reports new host calls and whether the guest function has settled.
    // (Just the outcome, a number, when there are no new calls: the common
    // case needs no JSON on either side.)
    poll() {
      if (outcome === 1 && undispatched > 0) return 3; // returned with an unawaited host call
      if (outbox.length === 0) return outcome;
      const calls = outbox;
      outbox = [];
      return JSONstringify([calls, outcome]);
    },
    settle: function jsrun$settle(idx, ok, payload, nowMs) {
      const c = mapGet(pending, idx);
      if (c === undefined) return;
      mapDelete(pending, idx);
      clock = nowMs;
      if (ok) { c.resolve(deserialize(payload)); return; }
      const info = JSONparse(payload);
      const e = jsrun$runtimeError(info.name, info.message, info.code, guestStack(c.site));
      c.reject(e);
    },
    // finish serializes the outcome: [1, wire] or [2, errorInfo].
    finish(maxResult) {
      if (outcome === 1) {
        try {
          return JSONstringify([1, serialize(outcomeValue, 'result')]);
        } catch (e) {
          return JSONstringify([2, errorInfo(e)]);
        }
      }
      return JSONstringify([2, errorInfo(outcomeValue)]);
    },
    console() { return JSONstringify([consoleOut, consoleTruncated]); },
    detached() { return firstUndispatched; },
    discovered() { return JSONstringify(discovered); },
  });
})
