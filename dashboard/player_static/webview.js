// The replay drawn in the browser with three.js (vendored under vendor/, nothing from a CDN):
// a MuJoCo scene converted once on the server (replay/render/web_scene.py) and an episode's
// per-step body and camera poses. Stepping and seeking draw from what was fetched; no request.
//
// MuJoCo's cameras look down -z with y up, as three.js's do, so a camera's pose is its
// cam_xpos / cam_xmat and its intrinsics are fovy (vertical, degrees) and the canvas's aspect.
// Surfaces are lit as MuJoCo's renderer lights them (`mujocoMaterial`), without colour
// management, so colours are MuJoCo's own.
import * as THREE from "three";
import { OrbitControls } from "./vendor/OrbitControls.js";
import { lightUniforms, mujocoMaterial, placeLights, primitive } from "./mujoco_look.js";

const ARRAYS = { int8: Int8Array, int16: Int16Array, uint16: Uint16Array, uint32: Uint32Array,
                 float32: Float32Array, bytes: Uint8Array };
const TINT = [1.0, 0.06, 0.06];  // replay/render/highlight.py TINT_RGBA
const VIOLATION_RGB = "rgb(230,25,25)", SUCCESS_RGB = "rgb(25,170,60)";  // replay/render/violation.py
const STILL = 1;  // the three.js layer of the geoms an episode never moves (see `stillLayer`)

export function parseBlob(buf) {
  const magic = new TextDecoder().decode(new Uint8Array(buf, 0, 4));
  if (magic !== "SVW1") throw new Error("not a web scene file");
  const n = new DataView(buf).getUint32(4, true);
  const header = JSON.parse(new TextDecoder().decode(new Uint8Array(buf, 8, n)));
  const base = 8 + n;
  const arr = (ref) => {
    const T = ARRAYS[ref[2]];
    return new T(buf, base + ref[0], ref[1] / T.BYTES_PER_ELEMENT);
  };
  return { header, arr };
}

function mjQuat(q, out) { return out.set(q[1], q[2], q[3], q[0]); }  // MuJoCo (w, x, y, z)

async function loadTexture(t, arr) {
  if (!t.image) return null;
  const blob = new Blob([arr(t.image)], { type: "image/png" });
  const bitmap = await createImageBitmap(blob, { imageOrientation: "none", premultiplyAlpha: "none" });
  const tex = new THREE.Texture(bitmap);
  tex.flipY = false;  // rows in MuJoCo's upload order: row 0 at t = 0
  tex.wrapS = tex.wrapT = THREE.RepeatWrapping;
  tex.colorSpace = t.srgb ? THREE.SRGBColorSpace : THREE.NoColorSpace;  // as MuJoCo uploads it
  tex.needsUpdate = true;
  return tex;
}

function meshGeometry(m, arr) {
  const geo = new THREE.BufferGeometry();
  geo.setAttribute("position", new THREE.BufferAttribute(arr(m.pos), 3, true));
  geo.setAttribute("normal", new THREE.BufferAttribute(arr(m.normal), 3, true));
  if (m.uv) geo.setAttribute("uv", new THREE.BufferAttribute(arr(m.uv), 2));
  geo.setIndex(new THREE.BufferAttribute(arr(m.index), 1));
  return geo;
}

// A viewer of one scene in `canvas` (WebGL; throws when there is none); `overlay`: a 2-D canvas
// over it for the border, captions and force arrows, as the offscreen frames draw them.
// `renderer`: the one a closed scene drew `canvas` with (`closeScene`), whose compiled shaders
// the new scene's materials share.
export async function openScene(canvas, overlay, sceneBuf, renderer = null) {
  const { header: H, arr } = parseBlob(sceneBuf);
  THREE.ColorManagement.enabled = false;
  if (!renderer) {
    renderer = new THREE.WebGLRenderer({ canvas, antialias: false, preserveDrawingBuffer: true });
    renderer.outputColorSpace = THREE.LinearSRGBColorSpace;
    renderer.setPixelRatio(1);
    renderer.autoClear = false;  // a scene's colour background still clears (three.js forces it)
  }
  const scene = new THREE.Scene();
  const textures = await Promise.all(H.textures.map((t) => loadTexture(t, arr)));
  const bg = H.background >= 0 ? H.textures[H.background].mean : [0, 0, 0];
  scene.background = new THREE.Color(bg[0], bg[1], bg[2]);

  const lights = lightUniforms(H);
  const camera = new THREE.PerspectiveCamera(45, canvas.width / canvas.height, H.znear, H.zfar);
  camera.up.set(0, 0, 1);  // MuJoCo's world is z-up (the orbit camera turns about z)
  scene.add(camera);

  // bodies and their geoms
  const bodies = [];
  for (let b = 0; b < H.nbody; b++) { const o = new THREE.Group(); bodies.push(o); scene.add(o); }
  const geoCache = new Map();
  const geoms = new Map();  // geom id -> {mesh, material}
  const segMaterials = new Map();
  for (const g of H.geoms) {
    const mat = g.material >= 0 ? H.materials[g.material] : null;
    const tinfo = mat && mat.texture >= 0 ? H.textures[mat.texture] : null;
    const rgb = g.rgba.slice(0, 3);
    if (tinfo && !tinfo.image) for (let k = 0; k < 3; k++) rgb[k] *= tinfo.mean[k];
    const textured = tinfo && tinfo.image;
    let repeat = [1, 1];
    if (textured && g.type !== "box" && !(g.type === "mesh" && !H.meshes[g.mesh].uv)) {
      repeat = mat.repeat.slice();
      if (g.type === "plane" && mat.uniform) { repeat[0] *= 2 * g.size[0]; repeat[1] *= 2 * g.size[1]; }
    }
    const material = mujocoMaterial(lights, {
      rgba: rgb.concat(g.rgba[3]), emission: g.emission, specular: g.specular, shininess: g.shininess,
      map: textured ? textures[mat.texture] : null, repeat, side: g.type === "mesh" ? THREE.DoubleSide : THREE.FrontSide });
    let obj;
    if (g.type === "mesh") {
      const m = H.meshes[g.mesh];
      if (!geoCache.has(g.mesh)) geoCache.set(g.mesh, meshGeometry(m, arr));
      obj = new THREE.Mesh(geoCache.get(g.mesh), material);
      obj.position.set(...m.centre);
      obj.scale.set(...m.half);
    } else {
      obj = new THREE.Mesh(primitive(g, H), material);
    }
    const frame = new THREE.Group();
    frame.position.set(...g.pos);
    mjQuat(g.quat, frame.quaternion);
    frame.add(obj);
    bodies[g.body].add(frame);
    geoms.set(g.id, { mesh: obj, material, body: g.body, specular: g.specular, shininess: g.shininess });
    const id = g.body + 1;  // segmentation colour: the body id + 1 (0 is the background)
    segMaterials.set(g.id, new THREE.MeshBasicMaterial({ color: new THREE.Color((id & 255) / 255, ((id >> 8) & 255) / 255, 0),
                                                         side: THREE.DoubleSide }));
  }
  const marks = new THREE.Group();  // contact discs
  scene.add(marks);
  return { H, renderer, scene, camera, lights, bodies, geoms, segMaterials, marks, canvas, overlay,
           background: scene.background, discMaterials: new Map(), still: stillLayer(renderer) };
}

// What an episode never moves (its still bodies' opaque, never tinted geoms: the table, the floor,
// the walls, the robot's pedestal, the objects left alone; two-fifths of a LIBERO scene's triangles
// and most of its pixels) is drawn once per camera pose into a texture with its depth. A step then
// copies that picture and its depth into the canvas and draws the rest over it, which is the same
// picture: the depth is kept as the float the rasteriser computed, so the canvas's depth buffer
// rounds it as it would have. The layer is made on the second draw from one camera pose, so a
// moving camera (the wrist's, an orbit being dragged) draws whole and pays nothing for it.
function stillLayer(renderer) {
  const layer = { target: null, key: null, lastKey: null, drawn: "whole" };
  const copy = new THREE.Mesh(new THREE.PlaneGeometry(2, 2), new THREE.ShaderMaterial({
    uniforms: { color: { value: null }, depth: { value: null } },
    vertexShader: "void main() { gl_Position = vec4(position.xy, 0.0, 1.0); }",
    fragmentShader: `uniform sampler2D color, depth;
      void main() {
        ivec2 p = ivec2(gl_FragCoord.xy);
        gl_FragColor = texelFetch(color, p, 0);
        gl_FragDepth = texelFetch(depth, p, 0).x;
      }`,
    depthFunc: THREE.AlwaysDepth }));
  copy.frustumCulled = false;
  const copyScene = new THREE.Scene().add(copy), copyCamera = new THREE.OrthographicCamera();
  const size = new THREE.Vector2();

  const dropTarget = () => { if (layer.target) { layer.target.depthTexture.dispose(); layer.target.dispose(); } };
  function make(w, h) {
    dropTarget();
    layer.target = new THREE.WebGLRenderTarget(w, h, { minFilter: THREE.NearestFilter, magFilter: THREE.NearestFilter,
                                                      depthTexture: new THREE.DepthTexture(w, h, THREE.FloatType) });
    copy.material.uniforms.color.value = layer.target.texture;
    copy.material.uniforms.depth.value = layer.target.depthTexture;
  }

  // draws `scene` from `camera` (its matrices up to date), through the layer when `on` and it
  // holds this pose
  layer.draw = (scene, camera, on) => {
    renderer.getDrawingBufferSize(size);
    const key = on ? camera.matrixWorld.elements.concat(camera.projectionMatrix.elements, [size.x, size.y]).join() : null;
    if (key === null || (key !== layer.key && key !== layer.lastKey)) {
      layer.lastKey = key;
      layer.drawn = "whole";
      camera.layers.enableAll();
      renderer.render(scene, camera);
      return;
    }
    layer.drawn = key === layer.key ? "layer" : "layer made";
    if (key !== layer.key) {  // the second draw from this pose: the still geoms into the layer
      if (!layer.target || layer.target.width !== size.x || layer.target.height !== size.y) make(size.x, size.y);
      renderer.setRenderTarget(layer.target);
      camera.layers.set(STILL);
      renderer.render(scene, camera);
      renderer.setRenderTarget(null);
      layer.key = key;
    }
    renderer.render(copyScene, copyCamera);
    const background = scene.background;
    scene.background = null;  // a colour background would clear the copied picture
    camera.layers.set(0);
    renderer.render(scene, camera);
    scene.background = background;
  };
  layer.forget = () => { layer.key = layer.lastKey = null; };
  layer.dispose = () => {
    dropTarget();
    copy.geometry.dispose(); copy.material.dispose();
  };
  return layer;
}

// Gives back what a scene view holds on the GPU and lets go of its orbit camera's mouse; its
// renderer stays for the canvas's next scene. Closed after the next scene's first draw, the
// shaders both scenes use are not compiled again.
export function closeScene(view) {
  const done = new Set();
  const give = (x) => { if (x && !done.has(x)) { done.add(x); x.dispose(); } };
  view.scene.traverse((o) => { give(o.geometry); give(o.material); });
  for (const g of view.geoms.values()) {
    give(g.material); give(g.tint);
    const map = g.material.uniforms.map.value;
    if (map && !done.has(map)) { give(map); map.image.close(); }  // the decoded ImageBitmap too
  }
  for (const m of view.segMaterials.values()) give(m);
  for (const m of view.discMaterials.values()) give(m);
  give(view.unitDisc);
  view.still.dispose();
  if (view.controls) view.controls.dispose();
}

// One episode in an opened scene: `show(step)` poses it and draws (no request).
export function openEpisode(view, posesBuf, opts = {}) {
  const { header: E, arr } = parseBlob(posesBuf);
  const { H, renderer, scene, camera, lights, bodies, geoms, segMaterials, marks, canvas, overlay } = view;
  const stat = arr(E.buffers.static), poses = arr(E.buffers.poses), cams = arr(E.buffers.cams);
  const nm = E.moving.length, nc = E.cameras.length;
  for (let b = 0; b < bodies.length; b++) {
    bodies[b].position.set(stat[7 * b], stat[7 * b + 1], stat[7 * b + 2]);
    bodies[b].quaternion.set(stat[7 * b + 4], stat[7 * b + 5], stat[7 * b + 6], stat[7 * b + 3]);
  }
  for (const g of geoms.values()) g.mesh.material = g.material;  // nothing tinted by an earlier episode
  marks.clear();
  const moving = new Set(E.moving), marked = new Set(Object.values(E.marks).flatMap((m) => m.tint));
  for (const [id, g] of geoms) {
    g.mesh.layers.set(moving.has(g.body) || marked.has(id) || g.material.transparent ? 0 : STILL);
  }
  view.still.forget();
  // a violating geom as highlight.py tints it: TINT_RGBA, no material, emission 0.35, its own specular
  const tinted = (g) => g.tint || (g.tint = mujocoMaterial(lights, {
    rgba: TINT.concat(1), emission: 0.35, specular: g.specular, shininess: g.shininess, side: g.material.side }));
  const unitDisc = view.unitDisc || (view.unitDisc = new THREE.CylinderGeometry(1, 1, 2, 24).rotateX(Math.PI / 2));
  const discMaterial = (rgba) => {  // mjv_initGeom's defaults, one per colour
    const key = rgba.join(",");
    if (!view.discMaterials.has(key)) view.discMaterials.set(key, mujocoMaterial(lights, { rgba }));
    return view.discMaterials.get(key);
  };
  const state = { step: 0, view: nc ? E.cameras[0].name : "orbit", segment: false, layered: true, tinted: [], drawMs: 0,
                  onDraw: opts.onDraw || null };
  const views = E.cameras.map((c) => c.name).concat(["orbit"]);

  function placeOrbit() {
    const o = E.orbit || { lookat: H.center, distance: 1.5 * H.extent, azimuth: 90, elevation: -45 };
    const az = THREE.MathUtils.degToRad(o.azimuth), el = THREE.MathUtils.degToRad(o.elevation);
    const fwd = new THREE.Vector3(Math.cos(el) * Math.cos(az), Math.cos(el) * Math.sin(az), Math.sin(el));
    camera.position.set(...o.lookat).addScaledVector(fwd, -o.distance);
    camera.fov = 45;
    camera.updateProjectionMatrix();
    if (!view.controls) {  // one per scene view, shared by its episodes
      view.controls = new OrbitControls(camera, overlay || canvas);
      view.controls.addEventListener("change", () => { if (view.onOrbit) view.onOrbit(); });
    }
    view.onOrbit = () => { if (state.view === "orbit") draw(); };
    view.controls.target.set(...o.lookat);
    view.controls.enabled = true;
    view.controls.update();
  }

  function pose(step) {
    const o = step * nm * 7;
    for (let j = 0; j < nm; j++) {
      const b = bodies[E.moving[j]], k = o + 7 * j;
      b.position.set(poses[k], poses[k + 1], poses[k + 2]);
      b.quaternion.set(poses[k + 4], poses[k + 5], poses[k + 6], poses[k + 3]);
    }
    const c = E.cameras.findIndex((x) => x.name === state.view);
    if (c >= 0) {
      const k = (step * nc + c) * 7;
      camera.position.set(cams[k], cams[k + 1], cams[k + 2]);
      camera.quaternion.set(cams[k + 4], cams[k + 5], cams[k + 6], cams[k + 3]);
      camera.fov = E.cameras[c].fovy;
    }
    camera.aspect = canvas.width / canvas.height;
    camera.updateProjectionMatrix();
    // violation marks: tinted geoms and contact discs
    const mark = E.marks[String(step)];
    for (const id of state.tinted) { const g = geoms.get(id); if (g) g.mesh.material = g.material; }
    state.tinted = [];
    marks.clear();
    if (mark && !state.segment) {
      for (const id of mark.tint) { const g = geoms.get(id); if (g) { g.mesh.material = tinted(g); state.tinted.push(id); } }
      for (const d of mark.discs) {
        // one unit cylinder (axis z, half-height 1) for every disc, scaled by its size: a geometry per
        // drawn disc was GPU buffers never given back, every draw of a violating step
        const disc = new THREE.Mesh(unitDisc, discMaterial(d.rgba));
        const R = d.mat, [r, h] = d.size;
        disc.matrixAutoUpdate = false;
        disc.matrix.set(R[0] * r, R[1] * r, R[2] * h, d.pos[0], R[3] * r, R[4] * r, R[5] * h, d.pos[1],
                        R[6] * r, R[7] * r, R[8] * h, d.pos[2], 0, 0, 0, 1);
        marks.add(disc);
      }
    }
    return mark;
  }

  function project(p) {
    const v = new THREE.Vector3(...p).project(camera);
    if (v.z > 1) return null;
    return [(v.x + 1) / 2 * canvas.width, (1 - v.y) / 2 * canvas.height];
  }

  function drawOverlay(mark, step) {
    if (!overlay) return;
    overlay.width = canvas.width; overlay.height = canvas.height;
    const ctx = overlay.getContext("2d");
    ctx.clearRect(0, 0, overlay.width, overlay.height);
    if (state.segment) return;
    const w = Math.max(3, Math.round(canvas.width / 80));  // overlay.border_width
    const border = mark ? VIOLATION_RGB : step === E.success_step ? SUCCESS_RGB : null;
    if (mark) {
      const aw = Math.max(3, Math.floor(canvas.width / 110));
      for (const a of mark.arrows) {
        const t = project(a.tail), h = project(a.head);
        if (!t || !h) continue;
        for (const [color, extra] of [["rgb(40,30,0)", 2], ["rgb(255,217,0)", 0]]) {
          ctx.strokeStyle = ctx.fillStyle = color;
          ctx.lineWidth = aw + 2 * extra;
          const ux = h[0] - t[0], uy = h[1] - t[1], len = Math.hypot(ux, uy) || 1, u = [ux / len, uy / len];
          const wing = [-u[1] * 2.2 * aw, u[0] * 2.2 * aw];
          ctx.beginPath(); ctx.moveTo(t[0], t[1]); ctx.lineTo(h[0] - 3 * aw * u[0], h[1] - 3 * aw * u[1]); ctx.stroke();
          ctx.beginPath(); ctx.moveTo(h[0], h[1]);
          ctx.lineTo(h[0] - 3.5 * aw * u[0] + wing[0], h[1] - 3.5 * aw * u[1] + wing[1]);
          ctx.lineTo(h[0] - 3.5 * aw * u[0] - wing[0], h[1] - 3.5 * aw * u[1] - wing[1]); ctx.closePath(); ctx.fill();
        }
        if (a.label) {
          ctx.font = `bold ${Math.max(11, Math.round(canvas.height / 26))}px sans-serif`;
          const tw = ctx.measureText(a.label).width;
          ctx.fillStyle = "rgba(0,0,0,0.67)"; ctx.fillRect(t[0] - tw / 2 - 3, t[1] - 22, tw + 6, 18);
          ctx.fillStyle = "rgb(255,217,0)"; ctx.fillText(a.label, t[0] - tw / 2, t[1] - 8);
        }
      }
      const px = Math.max(12, Math.round(canvas.height / 22));
      ctx.font = `${px}px sans-serif`;
      mark.captions.forEach((line, k) => {
        const y = canvas.height - w - 6 - (mark.captions.length - 1 - k) * (px + 6);
        const tw = ctx.measureText(line).width;
        ctx.fillStyle = "rgba(0,0,0,0.67)"; ctx.fillRect(w + 4, y - px, tw + 8, px + 5);
        ctx.fillStyle = "white"; ctx.fillText(line, w + 8, y);
      });
    }
    if (border) { ctx.strokeStyle = border; ctx.lineWidth = 2 * w; ctx.strokeRect(0, 0, canvas.width, canvas.height); }
  }

  function draw() {
    const t0 = performance.now();
    const mark = pose(state.step);
    camera.updateMatrixWorld();
    placeLights(lights, camera);
    view.still.draw(scene, camera, state.layered && !state.segment);
    drawOverlay(mark, state.step);
    state.drawMs = performance.now() - t0;
    if (state.onDraw) state.onDraw(state.step, state.drawMs);
  }

  return {
    views, header: E,
    show(step) { state.step = Math.max(0, Math.min(E.n_steps - 1, step | 0)); draw(); },
    setView(name) {
      state.view = views.includes(name) ? name : views[0];
      if (view.controls) view.controls.enabled = state.view === "orbit";
      if (state.view === "orbit") placeOrbit();
      draw();
    },
    get view() { return state.view; },
    get drawMs() { return state.drawMs; },
    setSize(w, h) { renderer.setSize(w, h, false); draw(); },
    segmentation(on) {  // flat colours by body (tests): body id + 1 in the red and green channels
      state.segment = !!on;
      for (const [id, g] of geoms) g.mesh.material = on ? segMaterials.get(id) : g.material;
      scene.background = on ? new THREE.Color(0, 0, 0) : view.background;
      draw();
    },
    // the still layer on or off (on by default; off draws every geom at every step), and how
    // the last picture was drawn: "whole", "layer made" or "layer"
    layered(on) { state.layered = !!on; view.still.forget(); draw(); },
    get drawnWith() { return view.still.drawn; },
  };
}
