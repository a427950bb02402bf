window.addEventListener("load", function () {
  var images = document.images, broken = 0;
  for (var i = 0; i < images.length; i++) {
    if (!images[i].complete || images[i].naturalWidth === 0) broken++;
  }
  var check = document.getElementById("image-check");
  check.setAttribute("data-broken", String(broken));
  check.setAttribute("data-images", String(images.length));
  if (broken > 0) {
    check.hidden = false;
    check.textContent = broken + " of " + images.length + " images failed to load";
  }
});
