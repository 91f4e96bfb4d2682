// The report page: "Copy" buttons copy the text of the element their data-copy names.
document.addEventListener("click", (event) => {
  const button = event.target.closest("[data-copy]");
  if (!button) return;
  const source = document.querySelector(button.dataset.copy);
  if (!source) return;
  navigator.clipboard.writeText(source.value ?? source.textContent).then(
    () => { button.textContent = "Copied"; },
    () => { source.select(); },
  );
});
