/* JSON number text to double, correctly rounded: to_double(), for scoring/_columns.c.

   Kept apart because it is the one delicate part of the C module; tests/test_columns_c.py
   checks it bit for bit against Python's float(). Needs Python.h (CPython's parser is the
   slow path) and the generated table of powers of five. */

#ifndef SAFEVLA_JSON_NUMBER_H
#define SAFEVLA_JSON_NUMBER_H

#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "_pow5_table.h"

#ifndef __SIZEOF_INT128__
/* the optional build then fails and JSONL takes the pure-Python path */
#error "the Eisel-Lemire product needs a 128-bit integer type (GCC or Clang on a 64-bit target)"
#endif

/* The decimal significand w (at most 19 digits) and exponent q are read exactly;
   w * 10^q is then rounded to the nearest double, ties to even. Clinger's fast path
   covers w <= 2^53 with |q| <= 22 (both factors exact, one rounding); otherwise the
   Eisel-Lemire algorithm multiplies by a 128-bit power of five (Lemire 2021; with a
   19-digit w the 128-bit product always decides, Mushtak & Lemire 2023). What neither
   covers (more than 19 digits, subnormals) goes to CPython's own correctly rounded
   parser. A JSON integer zero is +0.0 even when written "-0": orjson reads it as the
   int 0, which is what the reference path sees. */

static const double EXACT_POW10[] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,  1e8,  1e9,  1e10, 1e11,
                                     1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

/* 0 and the double in *out, or -1 when Eisel-Lemire leaves it to the slow path */
static int eisel_lemire(uint64_t w, int64_t q, double *out) {
    int lz = __builtin_clzll(w);
    w <<= lz;
    const uint64_t *five = &POW5_128[2 * (q - POW5_SMALLEST)];
    unsigned __int128 product = (unsigned __int128)w * five[0];
    uint64_t hi = (uint64_t)(product >> 64), lo = (uint64_t)product;
    if ((hi & 0x1FF) == 0x1FF) { /* the truncated power may matter: add its low half */
        uint64_t carry = (uint64_t)(((unsigned __int128)w * five[1]) >> 64);
        lo += carry;
        if (carry > lo) hi++;
    }
    int upper = (int)(hi >> 63);
    int shift = upper + 9;
    uint64_t mantissa = hi >> shift;
    int64_t power2 = ((217706 * q) >> 16) + 63 + upper - lz + 1023;
    if (power2 <= 0) return -1; /* subnormal */
    /* an exact tie can only happen where 5^q is exact: round it to even, not up */
    if (lo <= 1 && q >= -4 && q <= 23 && (mantissa & 3) == 1 && (mantissa << shift) == hi) mantissa &= ~(uint64_t)1;
    mantissa += mantissa & 1;
    mantissa >>= 1;
    if (mantissa >= ((uint64_t)2 << 52)) {
        mantissa = (uint64_t)1 << 52;
        power2++;
    }
    mantissa &= ~((uint64_t)1 << 52);
    if (power2 >= 0x7FF) return -1; /* overflow */
    uint64_t bits = mantissa | ((uint64_t)power2 << 52);
    memcpy(out, &bits, sizeof bits);
    return 0;
}

/* The JSON number [s, e) as a double: 0, or -1 (no Python error set) when it is not a
   finite double, which the caller declines. */
static int to_double(const char *s, const char *e, double *out) {
    const char *p = s;
    int negative = p < e && *p == '-';
    p += negative;
    uint64_t w = 0;
    int digits = 0, integer = 1, many = 0;
    int64_t q = 0;
    /* JSON grammar: digits before the point, after it and after the exponent are
       required ("", "-", ".", "1." and "1e" are not numbers) */
    if (!(p < e && *p >= '0' && *p <= '9')) return -1;
    for (; p < e && *p >= '0' && *p <= '9'; p++) {
        if (w == 0 && *p == '0') continue;
        if (digits == 19) many = 1;
        else w = w * 10 + (uint64_t)(*p - '0'), digits++;
        if (many) q++;
    }
    if (p < e && *p == '.') {
        integer = 0;
        p++;
        if (!(p < e && *p >= '0' && *p <= '9')) return -1;
        for (; p < e && *p >= '0' && *p <= '9'; p++) {
            if (w == 0 && *p == '0') {
                q--;
                continue;
            }
            if (digits == 19) many = 1;
            else w = w * 10 + (uint64_t)(*p - '0'), digits++, q--;
        }
    }
    if (p < e && (*p == 'e' || *p == 'E')) {
        integer = 0;
        p++;
        int minus = p < e && *p == '-';
        p += (p < e && (*p == '-' || *p == '+'));
        if (!(p < e && *p >= '0' && *p <= '9')) return -1;
        int64_t x = 0;
        for (; p < e && *p >= '0' && *p <= '9'; p++)
            if (x < 100000) x = x * 10 + (*p - '0');
        q += minus ? -x : x;
    }
    if (p != e) return -1;
    double value;
    if (w == 0) {
        value = 0.0;
    } else if (!many && w <= ((uint64_t)1 << 53) && q >= -22 && q <= 22) {
        value = q < 0 ? (double)w / EXACT_POW10[-q] : (double)w * EXACT_POW10[q];
    } else if (many || q < POW5_SMALLEST || q > POW5_LARGEST || eisel_lemire(w, q, &value) < 0) {
        char small[64];
        Py_ssize_t n = e - s;
        char *text = n < (Py_ssize_t)sizeof small ? small : PyMem_Malloc(n + 1);
        if (text == NULL) return -1;
        memcpy(text, s, n);
        text[n] = '\0';
        value = PyOS_string_to_double(text, NULL, NULL);
        if (text != small) PyMem_Free(text);
        if (value == -1.0 && PyErr_Occurred()) {
            PyErr_Clear();
            return -1;
        }
        *out = value;
        return isfinite(value) ? 0 : -1;
    }
    *out = negative && !(integer && w == 0) ? -value : value;
    return isfinite(*out) ? 0 : -1;
}

#endif
