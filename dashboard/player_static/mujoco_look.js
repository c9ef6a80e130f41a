// MuJoCo's look in three.js: surfaces lit as MuJoCo's renderer lights them, and its primitives
// tessellated as it makes them (webview.js draws the scene with these).
import * as THREE from "three";

// ---------------------------------------------------------------- lighting
// MuJoCo draws with OpenGL's fixed-function pipeline (src/render/classic/render_gl3.c): lit per
// vertex and interpolated (GL_SMOOTH), one-sided (LIGHT_MODEL_TWO_SIDE 0), a local viewer, the
// geom's rgba as ambient and diffuse colour (COLOR_MATERIAL), specular white times the geom's
// `specular` to the power `shininess` * 128, emission `emission` * rgba, and a texture that
// modulates the lit colour (GL_MODULATE). Its headlight is the first light, directional along
// the camera's view. The same equation here (OpenGL 2.1, section 2.14.1), per vertex: MuJoCo's
// own look, and far less work per pixel than three.js's per-pixel materials.
const MAX_LIGHTS = 8;  // OpenGL's fixed-function lights
const ffVertex = (nLights) => `
uniform vec3 rgb, emission, globalAmbient;
uniform float alpha, specular, shininess;
uniform vec2 repeat;
uniform vec4 lightPos[${MAX_LIGHTS}];  // eye space; w = 0: the direction towards a directional light
uniform vec3 lightDir[${MAX_LIGHTS}], lightAmbient[${MAX_LIGHTS}], lightDiffuse[${MAX_LIGHTS}],
             lightSpecular[${MAX_LIGHTS}], lightAttenuation[${MAX_LIGHTS}];
uniform vec2 lightSpot[${MAX_LIGHTS}];  // cos(cutoff) (-2: no cone), exponent
varying vec4 vColor;
varying vec2 vUv;
void main() {
  vec4 eye = modelViewMatrix * vec4(position, 1.0);
  gl_Position = projectionMatrix * eye;
  vUv = uv * repeat;
  vec3 n = normalize(normalMatrix * normal), v = normalize(-eye.xyz);
  vec3 c = emission + rgb * globalAmbient;
  #pragma unroll_loop_start
  for (int i = 0; i < ${nLights}; i++) {
  {  // a scope of its own: three.js unrolls the loop
      vec3 l = lightPos[i].xyz;
      float gain = 1.0;
      if (lightPos[i].w > 0.0) {  // a spot light
        l -= eye.xyz;
        float d = length(l);
        l /= d;
        vec3 k = lightAttenuation[i];
        float cosine = dot(-l, lightDir[i]);
        gain = cosine < lightSpot[i].x ? 0.0 : pow(max(cosine, 0.0), lightSpot[i].y) / (k.x + k.y * d + k.z * d * d);
      }
      float diffuse = max(dot(n, l), 0.0);
      vec3 term = rgb * (lightAmbient[i] + diffuse * lightDiffuse[i]);
      if (diffuse > 0.0) term += specular * pow(max(dot(n, normalize(l + v)), 0.0), shininess) * lightSpecular[i];
      c += gain * term;
  }
  }
  #pragma unroll_loop_end
  vColor = vec4(clamp(c, 0.0, 1.0), alpha);
}`;
const FF_FRAGMENT = `
varying vec4 vColor;
varying vec2 vUv;
#ifdef USE_MAP
uniform sampler2D map;
#endif
void main() {
  gl_FragColor = vColor;
#ifdef USE_MAP
  gl_FragColor *= texture2D(map, vUv);
#endif
}`;

// The lights of a scene as the uniforms every material shares (`placeLights` moves them with the camera).
export function lightUniforms(H) {
  const hl = H.headlight;
  const lights = (hl.active ? [{ head: true, ambient: hl.ambient, diffuse: hl.diffuse, specular: hl.specular }] : [])
    .concat(H.lights.filter((l) => l.active)).slice(0, MAX_LIGHTS);
  const vec3s = (key) => ({ value: Array.from({ length: MAX_LIGHTS }, (_, i) => new THREE.Vector3(...(lights[i] ? lights[i][key] : [0, 0, 0]))) });
  return {
    lights,
    uniforms: {
      globalAmbient: { value: new THREE.Vector3().setScalar(lights.length ? 0 : 0.3) },  // MuJoCo's initLights
      lightPos: { value: Array.from({ length: MAX_LIGHTS }, () => new THREE.Vector4(0, 0, 1, 0)) },
      lightDir: { value: Array.from({ length: MAX_LIGHTS }, () => new THREE.Vector3(0, 0, -1)) },
      lightAmbient: vec3s("ambient"), lightDiffuse: vec3s("diffuse"), lightSpecular: vec3s("specular"),
      lightAttenuation: { value: Array.from({ length: MAX_LIGHTS }, (_, i) => new THREE.Vector3(...(lights[i] && !lights[i].head ? lights[i].attenuation : [1, 0, 0]))) },
      lightSpot: { value: Array.from({ length: MAX_LIGHTS }, (_, i) => {
        const l = lights[i];
        return l && !l.head && !l.directional ? new THREE.Vector2(Math.cos(THREE.MathUtils.degToRad(l.cutoff)), l.exponent) : new THREE.Vector2(-2, 0);
      }) },
    },
  };
}

// The lights in the eye space of `camera` (its world matrices up to date): what OpenGL does to a
// light's position and direction given under the camera's modelview.
export function placeLights(L, camera) {
  const view = camera.matrixWorldInverse, u = L.uniforms;
  L.lights.forEach((l, i) => {
    if (l.head) { u.lightPos.value[i].set(0, 0, 1, 0); return; }  // towards the viewer: the camera's -forward
    if (l.directional) {
      u.lightPos.value[i].set(-l.dir[0], -l.dir[1], -l.dir[2], 0).applyMatrix4(view);
      u.lightPos.value[i].w = 0;
    } else {
      u.lightPos.value[i].set(l.pos[0], l.pos[1], l.pos[2], 1).applyMatrix4(view);
      u.lightDir.value[i].set(...l.dir).transformDirection(view);
    }
  });
}

// A surface as MuJoCo lights it: `rgba`, `emission` (times rgba), `specular`, `shininess` (MuJoCo's 0-1
// units), a texture `map` repeated `repeat` times, and three.js's `side`.
export function mujocoMaterial(L, { rgba, emission = 0, specular = 0.5, shininess = 0.5, map = null, repeat = [1, 1], side = THREE.FrontSide }) {
  return new THREE.ShaderMaterial({
    vertexShader: ffVertex(L.lights.length), fragmentShader: FF_FRAGMENT, defines: map ? { USE_MAP: "" } : {},
    side, transparent: rgba[3] < 1,
    uniforms: {
      ...L.uniforms,
      rgb: { value: new THREE.Vector3(rgba[0], rgba[1], rgba[2]) }, alpha: { value: rgba[3] },
      emission: { value: new THREE.Vector3(rgba[0] * emission, rgba[1] * emission, rgba[2] * emission) },
      specular: { value: specular }, shininess: { value: shininess * 128 },
      repeat: { value: new THREE.Vector2(repeat[0], repeat[1]) }, map: { value: map },
    },
  });
}

// ---------------------------------------------------------------- primitives
// Primitives tessellated as MuJoCo's renderer makes them (render_context.c): lit per vertex, the
// tessellation is what shades them, a floor's spot of light most of all.
const MAX_PLANE_GRID = 200;  // mjMAXPLANEGRID

// The grid lines of a plane's side of half-size `half` (> 0) and grid spacing `spacing` (its size[2]):
// an even number of cells 2 * spacing wide about the centre, padded out to the edges (makePlane).
function planeLines(half, spacing) {
  const cell = Math.max(spacing, half / (MAX_PLANE_GRID - 2));
  let n = Math.floor(half / Math.max(cell, 1e-14));
  n -= n % 2;
  const pad = half - n * cell, lines = [-half];
  for (let k = 0; k <= n; k++) lines.push(-half + pad + 2 * k * cell);
  lines.push(half);
  return lines.filter((x, k) => k === 0 || x > lines[k - 1] + 1e-12);
}

function planeGeometry(g, H) {
  const s = g.size;
  const side = (k) => {
    if (s[k] > 0) return planeLines(s[k], s[2]);
    const half = 2 * H.extent, d = (2.1 * H.zfar) / (MAX_PLANE_GRID - 2);  // an infinite side, cut at 2 extents
    const n = Math.ceil(half / d), lines = [];
    for (let k2 = -n; k2 <= n; k2++) lines.push(Math.max(-half, Math.min(half, k2 * d)));
    return lines.filter((x, k2) => k2 === 0 || x > lines[k2 - 1]);
  };
  const xs = side(0), ys = side(1), w = xs[xs.length - 1] - xs[0], h = ys[ys.length - 1] - ys[0];
  const pos = [], uv = [], normal = [], index = [];
  for (const y of ys) for (const x of xs) {
    pos.push(x, y, 0); normal.push(0, 0, 1); uv.push((x - xs[0]) / w, (y - ys[0]) / h);
  }
  const nx = xs.length;
  for (let j = 0; j + 1 < ys.length; j++) for (let i = 0; i + 1 < nx; i++) {
    const a = j * nx + i;
    index.push(a, a + 1, a + nx + 1, a, a + nx + 1, a + nx);
  }
  const geo = new THREE.BufferGeometry();
  geo.setAttribute("position", new THREE.Float32BufferAttribute(pos, 3));
  geo.setAttribute("normal", new THREE.Float32BufferAttribute(normal, 3));
  geo.setAttribute("uv", new THREE.Float32BufferAttribute(uv, 2));
  geo.setIndex(index);
  return geo;
}

export function primitive(g, H) {
  const s = g.size, q = H.quality;  // the model's vis.quality
  let geo;
  if (g.type === "plane") geo = planeGeometry(g, H);
  else if (g.type === "sphere") geo = new THREE.SphereGeometry(s[0], q.numslices, q.numstacks);
  else if (g.type === "ellipsoid") { geo = new THREE.SphereGeometry(1, q.numslices, q.numstacks); geo.scale(s[0], s[1], s[2]); }
  else if (g.type === "capsule") {
    geo = new THREE.CapsuleGeometry(s[0], 2 * s[1], Math.max(1, q.numstacks / 2), q.numslices);
    geo.rotateX(Math.PI / 2);
  } else if (g.type === "cylinder") {
    geo = new THREE.CylinderGeometry(s[0], s[0], 2 * s[1], q.numslices, q.numstacks);
    geo.rotateX(Math.PI / 2);
  } else if (g.type === "box") geo = new THREE.BoxGeometry(2 * s[0], 2 * s[1], 2 * s[2], q.numquads, q.numquads, q.numquads);
  return geo;
}
